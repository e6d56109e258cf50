#!/usr/bin/env python3
"""Regenerates jinja_cases.json: focused Jinja cases rendered by the reference implementation.

Each case is rendered with Jinja2 configured like transformers' apply_chat_template
(ImmutableSandboxedEnvironment, trim_blocks=True, lstrip_blocks=True, loopcontrols, its tojson
override and raise_exception). The C++ engine must reproduce every "expected" byte for byte and
fail on every case that has "error". Usage: python3 make_jinja_cases.py > jinja_cases.json
"""
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

BASE = {"xs": [1, 2, 3], "d": {"a": 1, "b": "x"}, "s": "héllo", "m": {"role": "user", "content": None}}

CASES = [
    # whitespace: trim_blocks / lstrip_blocks / '-' and '+' modifiers
    ("lstrip_trim_blocks", "  {% if true %}\n  x\n  {% endif %}\ny"),
    ("indented_loop", "{% if xs %}\n  {% for x in xs %}\n    - {{ x }}\n  {% endfor %}\n{% endif %}\nend"),
    ("minus_both_sides", "a  {%- if true -%}  b  {%- endif -%}  c"),
    ("minus_in_expressions", "a \n {{- 'b' -}} \n c"),
    ("plus_disables_lstrip_trim", "a\n    {%+ if true %}\n    b\n    {% endif +%}\nc"),
    ("lstrip_not_for_expressions", "a\n    {{ 'b' }}\n    {% if true %}c{% endif %}\n"),
    ("comments", "{# comment #}\nx\n  {# indented comment #}\ny {#- strip -#}   z"),
    ("trailing_newline_dropped", "x\n"),
    ("only_one_trailing_newline_dropped", "x\n\n"),
    ("crlf_normalized", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"),
    ("minus_strip_loop", "{%- for x in xs -%}\n    {{ x }}\n{%- endfor %}\n\ntail"),
    ("tag_not_at_line_start", "ab {% if true %}\nc{% endif %}"),
    ("lstrip_after_expression_line", "{{ 'a' }}\n   {% if true %}b{% endif %}"),
    ("raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}"),
    ("raw_block_whitespace", "x\n  {% raw %}\n  {{ a }}\n  {% endraw %}\ny"),
    # literals and operators
    ("string_escapes", "{{ \"it's\" }}{{ 'tab\\there' }}{{ 'nl\\nx' }}{{ '\\u00e9\\x41' }}{{ 'a' 'b' }}{{ 'back\\\\slash' }}"),
    ("numbers", "{{ 3.0 }} {{ 1.5e3 }} {{ 10 / 4 }} {{ -3 }} {{ 1_000 }} {{ 1e16 }} {{ 1e15 }} {{ 0.00001 }} {{ 0.1 + 0.2 }} {{ 1/3 }}"),
    ("integer_ops", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 7 }} {{ 2 ** 10 }} {{ true + 1 }} {{ 2 * 3 + 1 }} {{ 2 * (3 + 1) }}"),
    ("string_ops", "{{ 'a' * 3 }}{{ xs * 2 }}{{ 'a' ~ 1 ~ none }}{{ 'x' + 'y' }}{{ xs + [4] }}"),
    ("membership", "{{ 'x' in 'axb' }}{{ 2 in xs }}{{ 'a' in d }}{{ 'z' not in d }}{{ 5 not in xs }}"),
    ("logic", "{{ 1 and 2 }}{{ 0 and 2 }}{{ 0 or 'x' }}{{ '' or none }}{{ not 1 }}{{ not u }}"),
    ("comparisons", "{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ none == none }}{{ 1 != '1' }}"),
    ("conditional_expr", "{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' }}[{{ 'a' if false }}]"),
    ("python_reprs", "{{ [1, 'a', None, True, 1.5, {'k': \"it's\"}] }}{{ (1, 2) }}{{ (1,) }}{{ {'a': {'b': 1}} }}"),
    ("precedence", "{{ -2 ** 2 }} {{ '1' + 2 ~ 3 }} {{ not 1 == 2 }} {{ 'ab' ~ 'c' | upper }}"),
    # access and slicing
    ("attribute_and_item", "{{ d.a }}{{ d['b'] }}{{ m.role }}{{ xs[0] }}{{ xs[-1] }}{{ s[1] }}{{ xs.1 }}"),
    ("slicing", "{{ s[1:] }}|{{ s[::-1] }}|{{ xs[::2] }}|{{ xs[:-1] }}|{{ xs[5:] }}|{{ s[-2:] }}|{{ xs[::-1] }}|{{ xs[1:2] }}|{{ 'abcdef'[4:1:-1] }}"),
    ("missing_members_are_undefined", "[{{ xs.foo }}|{{ xs[10] }}|{{ d['zz'] }}|{{ d.zz is defined }}]"),
    # statements
    ("set_and_tuple_unpack", "{% set a, b = 1, 2 %}{% set c = a + b %}{{ a }}{{ b }}{{ c }}"),
    ("set_block", "{% set x %}block {{ 1 }}{% endset %}[{{ x }}]"),
    ("loop_variables", "{% for k in d %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ k }};{% endfor %}"),
    ("loop_prev_next", "{% for x in xs %}{{ loop.previtem is defined }}{{ loop.nextitem|default('-') }}{{ loop.cycle('a', 'b') }};{% endfor %}"),
    ("loop_else", "{% for x in [] %}a{% else %}empty{% endfor %}{% for x in xs %}{{ x }}{% else %}no{% endfor %}"),
    ("loop_filter", "{% for x in xs if x > 1 %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% endfor %}"),
    ("loop_break_continue", "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("loop_items_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|items %}{{ k }}{% endfor %}"),
    ("loop_over_string_and_dict", "{% for c in 'ab' %}{{ c }}.{% endfor %}{% for k in d %}{{ k }}{% endfor %}"),
    ("loop_scope_per_iteration", "{% set x = 5 %}{% for i in xs %}{{ x }}{% set x = i %}{% endfor %}{{ x }}"),
    ("loop_scope_no_carry", "{% for i in xs %}{% if i == 2 %}[{{ x }}]{% endif %}{% set x = i %}{% endfor %}{{ x }}"),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}"),
    ("namespace", "{% set ns = namespace(a=1, b='x') %}{% for x in xs %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}"),
    ("if_elif_else", "{% for v in [0, 1, 2] %}{% if v == 0 %}zero{% elif v == 1 %}one{% else %}many{% endif %} {% endfor %}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('bob') }} {{ greet('al', punct='?') }} {{ greet(name='cy') }}"),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
    ("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}"),
    ("range", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}{% for i in range(2) %}{{ i }}{% endfor %}"),
    ("dict_global", "{{ dict(a=1, b=2) }}"),
    # filters
    ("filters_strings", "{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'aXbX'|replace('X', '-') }}|{{ 'aXbX'|replace('X', '-', 1) }}|{{ 'x'|safe }}|{{ 'a b  c'|wordcount }}"),
    ("filters_conversion", "{{ none|string }}|{{ 12|string + 'x' }}|{{ '42'|int + 1 }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 2.9|int }}|{{ '2.5'|float }}|{{ 3|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}"),
    ("filters_sequences", "{{ xs|first }}|{{ xs|last }}|{{ 'abc'|first }}|{{ xs|join(', ') }}|{{ xs|join }}|{{ xs|length }}|{{ d|length }}|{{ s|length }}|{{ xs|count }}|{{ d|items|list }}|{{ 'ab'|list }}|{{ d|list }}"),
    ("filters_default", "{{ u|default('dflt') }}|{{ ''|default('e', true) }}|{{ ''|default('e') }}|{{ none|default('n') }}|{{ u|d('short') }}|{{ 0|default('z', boolean=true) }}"),
    ("filters_tojson", "{{ xs|tojson }}{{ d|tojson(indent=2) }}{{ {'a': [1, {'b': none}], 'c': 'é\"\\n<>&'}|tojson }}{{ []|tojson(indent=2) }}{{ {}|tojson }}{{ 1.0|tojson }}{{ true|tojson }}{{ 'x'|tojson }}"),
    ("filters_tojson_options", "{{ d|tojson(separators=(',', ':')) }}{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}{{ 'é'|tojson(true) }}{{ {'k': [1, 2]}|tojson(indent=4) }}"),
    ("filters_select_map", "{{ xs|map('string')|join('-') }}{{ [{'n': 1}, {'n': 2}]|map(attribute='n')|list }}{{ [{'n': 1, 't': true}, {'n': 2}]|selectattr('t')|list }}{{ [{'n': 1, 't': true}, {'n': 2}]|rejectattr('t', 'defined')|list }}{{ xs|select('odd')|list }}{{ xs|reject('odd')|list }}{{ [{'r': 'a'}, {'r': 'b'}]|selectattr('r', 'equalto', 'b')|list }}"),
    ("filters_sorting", "{{ {'b': 1, 'a': 2}|dictsort }}{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}{{ [3, 1, 2]|sort(reverse=true) }}{{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }}{{ xs|reverse|list }}{{ 'ab'|reverse }}{{ [1, 1, 2]|unique|list }}{{ xs|sum }}{{ xs|min }}{{ xs|max }}"),
    ("filters_indent", "{{ 'line1\\nline2\\n\\nline4'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(4, blank=true) }}|{{ 'a\\nb\\n'|indent }}"),
    ("filters_misc", "{{ 'hi'|center(6) }}|{{ '<a&b>'|escape }}|{{ xs|batch(2)|list }}"),
    # tests
    ("tests_types", "{{ none is none }}{{ 1 is number }}{{ 1.5 is number }}{{ 'a' is string }}{{ d is mapping }}{{ xs is mapping }}{{ xs is iterable }}{{ 1 is iterable }}{{ xs is sequence }}{{ 'a' is sequence }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}"),
    ("tests_values", "{{ true is true }}{{ false is false }}{{ 1 is true }}{{ u is not defined }}{{ none is not none }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 2 is in xs }}{{ 'a' is eq 'a' }}{{ 1 is ne 2 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ none is sameas none }}"),
    ("tests_precedence", "{{ not u is defined }}{{ u is defined and u }}{{ xs|length is odd }}{{ 'x' if u is defined else 'y' }}"),
    # methods
    ("methods_split", "{{ 'a,b,,c'.split(',') }}{{ '  x y  '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'a\\nb\\r\\nc'.splitlines() }}"),
    ("methods_affixes", "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('x') }}"),
    ("methods_strip_case", "[{{ '  x '.strip() }}][{{ 'xxaxx'.lstrip('x') }}][{{ 'xxaxx'.rstrip('x') }}][{{ ' \\n x'.lstrip() }}]{{ 'aBc'.upper() }}{{ 'aBc'.lower() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}"),
    ("methods_search_replace", "{{ 'aaa'.replace('a', 'b', 2) }}{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}{{ 'hello'.count('l') }}{{ '-'.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}"),
    ("methods_dict", "{{ d.get('a') }}{{ d.get('zz', 5) }}{{ d.get('zz') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}"),
    ("methods_unicode", "{{ s.upper() }}{{ 'ÀÉ'.lower() }}{{ 'αβ'.upper() }}{{ s|length }}{{ s[1:3] }}"),
    ("think_split", "{% set c = 'reasoning</think>\\n\\nanswer' %}{{ c.split('</think>')[-1].lstrip() }}|{{ c.split('</think>')[0] }}"),
    # undefined behaviour
    ("undefined_renders_empty", "[{{ u }}]{{ u is defined }}{{ u|length }}{{ u ~ 'a' }}{% for x in u %}no{% endfor %}{% if u %}no{% endif %}{{ u|string }}|{{ u|trim }}|{{ u == u }}{{ 'a' in u }}"),
    ("undefined_message_field", "{{ m.content is none }}{{ m.foo is defined }}{{ m['foo'] is none }}"),
    ("undefined_attr_error", "{{ u.a }}"),
    ("undefined_arith_error", "{{ u + 1 }}"),
    ("undefined_nested_attr_error", "{{ m.foo.bar }}"),
    ("undefined_call_error", "{{ u() }}"),
    ("raise_exception", "{% if true %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}"),
    ("type_error", "{{ 'a' + 1 }}"),
    ("unpack_error", "{% set a, b = [1, 2, 3] %}"),
    ("namespace_assign_error", "{% set d.a = 1 %}"),
    ("more_precedence", "{{ -1|abs }}{{ not xs|length }}{{ -xs[0] }}{{ xs|length - 1 }}{{ 10 // 3 * 3 }}{{ 2 ** 3 ** 2 }}{{ 1 if xs else 2 if d else 3 }}{{ true and false or 'x' }}"),
    ("more_reprs", "{{ ['\\n', '\\t', '\\x00', 'é', '\\u200b', \"it's\", 'say \"hi\"'] }}{{ 1e100 }} {{ 1.5e-7 }} {{ 123456789.123 }} {{ -0.0 }} {{ 1e22 }}"),
    ("more_tojson", "{{ '\\x01\\x7f\\t'|tojson }}{{ '😀'|tojson }}{{ '😀'|tojson(ensure_ascii=true) }}{{ [1.0, 2.5]|tojson }}{{ none|tojson }}"),
    ("more_slicing", "{{ xs[0:10:3] }}{{ xs[-10:] }}{{ xs[:-10] }}{{ s[10:] }}{{ s[::2] }}{{ s[-1::-2] }}"),
    ("more_case_mapping", "{{ 'ß'.upper() }}{{ \"they're bill's\".title() }}{{ 'ÉCOLE'.lower() }}{{ 'abc'.center(8, '*') }}{{ '-5'.zfill(4) }}"),
    ("more_undefined_tests", "{{ u is sequence }}{{ u is iterable }}{{ u is none }}{{ u is string }}{{ u is mapping }}{{ []|first is defined }}"),
    ("macro_sees_globals", "{% macro m(a) %}[{{ a }}|{{ xs|length }}]{% endmacro %}{% for x in xs %}{{ m(x) }}{% endfor %}"),
    ("division_by_zero_error", "{{ 3 / 0 }}"),
    ("ordering_type_error", "{{ 1 < 'a' }}"),
]

# Realistic template shapes written after public model templates (ChatML/Qwen, Llama 3/3.1, Mistral):
# tools with tojson, indentation with {%- -%}, reversed loops, selectattr, raise_exception.
CHATML_TOOLS = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

LLAMA3_STYLE = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

MISTRAL_STYLE = """{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"""

QWEN3_STYLE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

LLAMA31_STYLE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

MISTRAL_TOOLS_STYLE = """{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

TOOL_CONVERSATION = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": "Weather in Paris and Berlin?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Berlin", "unit": "c"}}}]},
    {"role": "tool", "content": "18C"},
    {"role": "tool", "content": "15C"},
    {"role": "assistant", "content": "Paris 18C, Berlin 15C."},
    {"role": "user", "content": "Thanks! 谢谢"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                         "required": ["city"]}}}]
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

QWEN_CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris? 日本"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 18.5}"},
    {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nIt is 18.5C."},
    {"role": "user", "content": "Thanks"},
]
MISTRAL_CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "abc123def", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "abc123def", "content": "18C"},
    {"role": "assistant", "content": " It is 18C. "},
    {"role": "user", "content": "Thanks"},
]

R1_TOOL_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "system", "content": "Use tools when needed."},
    {"role": "user", "content": "What's the weather in Paris and Berlin?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Berlin\"}"}}]},
    {"role": "tool", "content": "{\"temp\": 18}"},
    {"role": "tool", "content": "{\"temp\": 15}"},
    {"role": "assistant", "content": "It is 18C in Paris and 15C in Berlin."},
    {"role": "user", "content": "Which is warmer?"},
    {"role": "assistant", "content": "Let me compare 18 and 15.</think>\n\nParis is warmer."},
    {"role": "user", "content": "Thanks!"},
]
R1_TOKENS = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}


def render(template, variables):
    try:
        return {"expected": env.from_string(template).render(**variables)}
    except jinja2.exceptions.TemplateSyntaxError:
        raise
    except Exception as e:  # runtime failure the C++ engine must also report
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    cases = []
    for name, template in CASES:
        cases.append({"name": name, "template": template, "vars": BASE, **render(template, BASE)})
    for name, template, variables in [
        ("chatml_tools", CHATML_TOOLS, {"messages": TOOL_CONVERSATION, "tools": TOOLS, "add_generation_prompt": True}),
        ("chatml_no_tools", CHATML_TOOLS, {"messages": TOOL_CONVERSATION[:2], "tools": None, "add_generation_prompt": False}),
        ("llama3_style_tools", LLAMA3_STYLE, {"messages": TOOL_CONVERSATION, "tools": TOOLS, "add_generation_prompt": True, **TOKENS}),
        ("llama3_style_plain", LLAMA3_STYLE, {"messages": TOOL_CONVERSATION[:2], "tools": None, "add_generation_prompt": False, **TOKENS}),
        ("mistral_style", MISTRAL_STYLE, {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}], **TOKENS}),
        ("qwen3_style_tools", QWEN3_STYLE, {"messages": QWEN_CONVERSATION, "tools": TOOLS, "add_generation_prompt": True, "enable_thinking": False}),
        ("qwen3_style_plain", QWEN3_STYLE, {"messages": QWEN_CONVERSATION[:2], "tools": None, "add_generation_prompt": False}),
        ("llama31_style_builtin_tools", LLAMA31_STYLE, {"messages": MISTRAL_CONVERSATION, "tools": TOOLS, "builtin_tools": ["code_interpreter", "get_weather"], "add_generation_prompt": True, **TOKENS}),
        ("llama31_style_custom_tools", LLAMA31_STYLE, {"messages": MISTRAL_CONVERSATION, "tools": TOOLS, "add_generation_prompt": False, **TOKENS}),
        ("mistral_tools_style", MISTRAL_TOOLS_STYLE, {"messages": MISTRAL_CONVERSATION, "tools": TOOLS, **TOKENS}),
        ("mistral_style_raises", MISTRAL_STYLE, {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], **TOKENS}),
    ]:
        cases.append({"name": name, "template": template, "vars": variables, **render(template, variables)})
    with open(os.path.join(HERE, "deepseek-r1.jinja"), encoding="utf-8") as f:
        r1 = f.read()
    for agp in (True, False):
        variables = {"messages": R1_TOOL_CONVERSATION, "add_generation_prompt": agp, "tools": None, **R1_TOKENS}
        cases.append({"name": f"deepseek_r1_tools_agp_{str(agp).lower()}", "template_file": "deepseek-r1.jinja",
                      "vars": variables, **render(r1, variables)})
    out = {"producer": f"jinja2 {jinja2.__version__} with transformers' chat-template environment (make_jinja_cases.py)",
           "cases": cases}
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
