// dsinfer command-line entry point: dispatches to one subcommand per file under src/cli/.
#include <cstdio>

int main(int argc, char** argv) {
  std::printf("dsinfer 0.1.0\n");
  return 0;
}
