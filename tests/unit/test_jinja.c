/*
 * test_jinja.c — the chat-template interpreter (src/chat/jinja.h) case by
 * case, with Python's jinja2 as transformers configures it as the reference
 * (an ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks, loop
 * controls, transformers' tojson, raise_exception, strftime_now; see
 * ../shared/golden/chat_templates/README.md).
 *
 * 1. A table of template + context → expected output, or → an error whose
 *    message contains a given substring.  The contexts are JSON written with
 *    ' for " (CTX below is the default).  Every expected output was checked
 *    against jinja2 3.1 (run `test_jinja --dump`, feed the JSON lines to a
 *    jinja2 environment set up as above); the cases marked LIMIT are where
 *    deja stops on purpose and Python would go on (64-bit integers, the
 *    output cap, the step limit) or hang.
 * 2. Hostile inputs built by code: 10^5 nested brackets, 300 nested blocks,
 *    a 10^5-long operator chain, NUL bytes, invalid UTF-8, every prefix of a
 *    real template: each must fail with a clear message (or render), never
 *    crash, within bounded time.
 * 3. The limits in struct dj_jinja_params: a lower step or output limit
 *    stops a render that the defaults allow, and O(n) filters and methods
 *    applied to a big list or string in a loop reach the step limit quickly.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "chat/jinja.h"
#include "core/status.h"
#include "test.h"

#define NOW_2026_01_15_10_00 1768471200 /* 2026-01-15T10:00:00 UTC, a Thursday */

/* The default context. */
#define CTX                                                                                                            \
    "{'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi there'},"            \
    " {'role': 'assistant', 'content': 'Hello!', 'tool_calls': [{'type': 'function', 'function': {'name': 'get',"  \
    " 'arguments': {'city': 'Paris', 'days': 3}}}]}, {'role': 'user', 'content': [{'type': 'text', 'text': 'Bye'}]}]," \
    " 'tools': null, 'yes': true, 'no': false, 'd': {'b': 1, 'a': 2}, 'xs': [3, 1, 2], 'e': '', 'f': 0.5,"          \
    " 'big': 9223372036854775807, 'small': -9223372036854775808, 'u': 'h\\u00e9llo \\u65e5\\u672c'}"

enum { LIMIT = 1, RAISED = 2 };

struct jcase {
    const char *src;
    const char *want; /* the output, or NULL: an error */
    const char *err;  /* a substring of the error message (want == NULL) */
    int flags;
    const char *ctx;  /* NULL: CTX */
};

#define OK(src, want) {src, want, NULL, 0, NULL}
#define OKC(src, ctx, want) {src, want, NULL, 0, ctx}
#define ERR(src, err) {src, NULL, err, 0, NULL}
#define ERRL(src, err) {src, NULL, err, LIMIT, NULL}
#define OKL(src, want) {src, want, NULL, LIMIT, NULL}

static const struct jcase cases[] = {
    /* ---- literals ---- */
    OK("{{ 1 }}|{{ -3 }}|{{ 1.5 }}|{{ 1.0 }}|{{ 1e3 }}|{{ 2.5e-3 }}", "1|-3|1.5|1.0|1000.0|0.0025"),
    OK("{{ 'a' }}{{ \"b\" }}{{ 'c' \"d\" }}", "abcd"),
    OK("{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}", "True True False None None"),
    OK("{{ [1, 'a', none, true, 1.5] }}", "[1, 'a', None, True, 1.5]"),
    OK("{{ {'a': 1, 'b': [2]} }}", "{'a': 1, 'b': [2]}"),
    OK("{{ (1, 2) }}{{ (1,) }}{{ () }}", "(1, 2)(1,)()"),
    OK("{{ 1_000 }}", "1000"),
    OK("{{ 'a\\nb' }}|{{ 'tab\\there' }}|{{ 'q\\'s' }}|{{ \"d\\\"q\" }}|{{ 'back\\\\slash' }}",
       "a\nb|tab\there|q's|d\"q|back\\slash"),
    OK("{{ '\\u00e9\\x41' }}", "\xc3\xa9" "A"),
    OK("{{ ['it\\'s', 'say \"x\"', 'both \\' \"', '\\n'] }}", "[\"it's\", 'say \"x\"', 'both \\' \"', '\\n']"),
    OK("{{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 }} {{ 1e-5 }} {{ -0.0 }}", "1e+20 1e+16 1000000000000000.0 0.1 1e-05 -0.0"),

    /* ---- arithmetic and concatenation ---- */
    OK("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }}",
       "7 9 3.5 2.0 3 -4 -4"),
    OK("{{ -7 % 3 }} {{ 7 % -3 }} {{ 5.5 % -2 }} {{ 5 // 2.0 }}", "2 -2 -0.5 2.0"),
    OK("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }} {{ 2 ** 3 ** 2 }}", "1024 0.5 1.4142135623730951 64"),
    OK("{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 1 + 1.0 }}", "0.30000000000000004 0.3333333333333333 2.0"),
    OK("{{ true + 1 }} {{ -true }}", "2 -1"),
    OK("{{ 'a' ~ 1 ~ none ~ true ~ 1.5 }}", "a1NoneTrue1.5"),
    OK("{{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [0] * 2 }} {{ 'x' * -1 }}",
       "ab [1, 2] ababab xx [0, 0] "),
    OK("{{ -3|abs }} {{ (-3)|abs }} {{ -(xs|first) }}", "3 3 -3"),
    ERR("{{ -xs|first }}", "bad operand type for unary -: 'list'"),
    ERR("{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'"),
    ERR("{{ 'a' - 'b' }}", "unsupported operand type(s) for -"),
    ERR("{{ [1] + 'a' }}", "can only concatenate list"),
    ERR("{{ 1 / 0 }}", "ZeroDivisionError"),
    ERR("{{ 1 // 0 }}", "ZeroDivisionError"),
    ERR("{{ 1 % 0 }}", "ZeroDivisionError"),
    ERR("{{ 1.0 / 0 }}", "ZeroDivisionError"),
    ERR("{{ 1.5 // 0.0 }}", "ZeroDivisionError"),
    ERR("{{ 0 ** -1 }}", "ZeroDivisionError"),

    /* ---- comparisons, membership, logic ---- */
    OK("{{ 1 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 != 2 }} {{ none == none }}",
       "True True True True False True True"),
    OK("{{ [1, 2] == [1, 2] }} {{ [1, 2] < [1, 3] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }}",
       "True True False True"),
    OK("{{ 1 == 'a' }} {{ none != 0 }} {{ 0 == false }} {{ 1 == true }}", "False True True True"),
    ERR("{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'"),
    ERR("{{ none < 1 }}", "not supported between"),
    OK("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1, 2] }} {{ 'role' in messages[0] }}",
       "True True True True True"),
    OK("{{ 'x' not in 'abc' }} {{ '' in 'abc' }} {{ 1 in (1, 2) }}", "True True True"),
    ERR("{{ 1 in 'abc' }}", "'in <string>' requires string as left operand, not int"),
    ERR("{{ 1 in 5 }}", "argument of type 'int' is not iterable"),
    OK("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ 0 and nosuch.attr }} {{ 1 or nosuch.attr }} {{ not 0 }} {{ not [] }}"
       " {{ none or [] }} {{ '' and 1 }}|",
       "x y 0 1 True True [] |"),
    OK("{{ not 1 == 2 }} {{ not 'a' in 'b' }} {{ 'a' not in 'b' and 1 }}", "True True 1"),
    OK("{{ 'a' if 1 else 'b' }} {{ 'a' if 0 else 'b' }} [{{ 'a' if 0 }}] {{ ('a' if 0) is defined }}",
       "a b [] False"),
    OK("{{ 'x' if yes else nosuch.attr }}", "x"),
    OK("{{ 1 if 0 else 2 if 0 else 3 }}", "3"),

    /* ---- filters ---- */
    OK("[{{ '  x  '|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ s|trim }}]", "[x] [a] []"),
    OK("{{ xs|length }} {{ u|length }} {{ d|length }} {{ 'abc'|count }} {{ e|length }}", "3 8 2 3 0"),
    OK("{{ 'abc'|upper }} {{ 'ABC'|lower }} {{ u|upper }} {{ '\\u00c9COLE'|lower }}",
       "ABC abc H\xc3\x89LLO \xe6\x97\xa5\xe6\x9c\xac \xc3\xa9" "cole"),
    OK("{{ 'hello wORLD'|title }}|{{ \"they're bill's\"|title }}|{{ 'a-b (c'|title }}",
       "Hello World|They're Bill's|A-B (C"),
    OK("{{ 'hELLO World'|capitalize }}", "Hello world"),
    OK("{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}", "bbb bba -a-b-c-"),
    OK("{{ xs|join(', ') }}|{{ xs|join }}|{{ messages|join('-', attribute='role') }}|{{ []|join('x') }}",
       "3, 1, 2|312|system-user-assistant-user|"),
    OK("[{{ nosuch|default('d') }}] [{{ e|default('d') }}] [{{ e|default('d', true) }}] [{{ none|default('d') }}]"
       " [{{ none|d('d', true) }}] [{{ 0|d('z', boolean=true) }}] [{{ nosuch|d }}]",
       "[d] [] [d] [None] [d] [z] []"),
    OK("{{ xs|first }} {{ xs|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]", "3 2 a c []"),
    OK("{{ 'ab'|list }} {{ d|list }} {{ (1, 2)|list }} {{ range(3)|list }}", "['a', 'b'] ['b', 'a'] [1, 2] [0, 1, 2]"),
    OK("{{ d|items|list }} {{ d.items()|list }}", "[('b', 1), ('a', 2)] [('b', 1), ('a', 2)]"),
    OK("{{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }} {{ {'B': 1, 'a': 2}|dictsort }}"
       " {{ {'B': 1, 'a': 2}|dictsort(true) }}",
       "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)] [('a', 2), ('B', 1)] [('B', 1), ('a', 2)]"),
    OK("{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
       " {{ messages|rejectattr('role', '==', 'system')|map(attribute='role')|join(',') }}"
       " {{ messages|selectattr('tool_calls')|map(attribute='role')|list }}"
       " {{ messages|selectattr('tool_calls', 'defined')|list|length }}",
       "2 user,assistant,user ['assistant'] 1"),
    OK("{{ messages|map(attribute='tool_calls.0.function.name', default='-')|join(',') }}", "-,-,get,-"),
    OK("{{ ['a', 'b']|map('upper')|join }} {{ ['1', '2']|map('int')|sum }} {{ [1, 'a']|map('string')|list }}",
       "AB 3 ['1', 'a']"),
    OK("{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ xs|select('gt', 1)|list }} {{ [0, 1, '']|select|list }}",
       "[3, 1] [2] [3, 2] [1]"),
    OK("{{ {'a': [1, 2.5, none, true, 'x\"\\\\y\\n'], 'b': {}}|tojson }}",
       "{\"a\": [1, 2.5, null, true, \"x\\\"\\\\y\\n\"], \"b\": {}}"),
    OK("{{ u|tojson }} {{ u|tojson(ensure_ascii=true) }} {{ '<&>\\''|tojson }}",
       "\"h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac\" \"h\\u00e9llo \\u65e5\\u672c\" \"<&>'\""),
    OK("{{ {'b': [1, {'c': []}], 'a': {}}|tojson(indent=2) }}",
       "{\n  \"b\": [\n    1,\n    {\n      \"c\": []\n    }\n  ],\n  \"a\": {}\n}"),
    OK("{{ d|tojson(sort_keys=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }} {{ (1, 2)|tojson }}",
       "{\"a\": 2, \"b\": 1} [1,2] [1, 2]"),
    OK("{{ 1.0|tojson }} {{ 1e-5|tojson }} {{ f|tojson }} {{ big|tojson }} {{ none|tojson }}",
       "1.0 1e-05 0.5 9223372036854775807 null"),
    OK("{{ [1]|tojson(indent='\\t') }}", "[\n\t1\n]"),
    OK("{{ messages[2].tool_calls[0].function.arguments|tojson }}", "{\"city\": \"Paris\", \"days\": 3}"),
    ERR("{{ nosuch|tojson }}", "is not JSON serializable"),
    ERR("{{ range|tojson }}", "is not JSON serializable"),
    OK("{{ '<b>'|safe }} {{ '<b>'|e }} {{ '<b>'|safe|e }} {{ '<b>'|escape|e }}", "<b> &lt;b&gt; <b> &lt;b&gt;"),
    OK("{{ 1|string ~ 'a' }} {{ [1]|string }} {{ none|string }}", "1a [1] None"),
    OK("{{ '42'|int + 1 }} {{ 'x'|int }} {{ '3.7'|int }} {{ 3.9|int }} {{ 'x'|int(7) }} {{ ' 12 '|int }} {{ -3.9|int }}"
       " {{ true|int }}",
       "43 0 3 3 7 12 -3 1"),
    OK("{{ '1.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ '1e3'|float }}", "1.5 0.0 2.0 1000.0"),
    OK("{{ 2.5|round }} {{ 3.5|round }} {{ -2.5|round }} {{ 2.456|round(2) }} {{ 2.4|round(method='ceil') }}"
       " {{ 2.6|round(0, 'floor') }} {{ 7|round }}",
       "2.0 4.0 -2.0 2.46 3.0 2.0 7"),
    OK("{{ [1, 2, 1, 3]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ ['a', 'A']|unique(true)|list }}",
       "[1, 2, 3] ['a', 'b'] ['a', 'A']"),
    OK("{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }}", "[[1, 2], [3, 4], [5]] [[1, 2], [3, 0]]"),
    OK("[{{ 'a\\nb\\n\\nc'|indent(2) }}] [{{ 'a\\nb'|indent(2, true) }}] [{{ 'a\\n\\nb'|indent('> ', blank=true) }}]",
       "[a\n  b\n\n  c] [  a\n  b] [a\n> \n> b]"),
    OK("{{ 'a b  c\\nd'|wordcount }}", "4"),
    OK("{{ xs|sum }} {{ xs|max }} {{ xs|min }} {{ ['b', 'A']|min }} {{ [{'n': 1}, {'n': 5}]|sum(attribute='n') }}"
       " {{ xs|sum(start=10) }}",
       "6 3 1 A 6 16"),
    OK("{{ xs|sort|list }} {{ xs|sort(reverse=true)|join }} {{ ['b', 'A', 'c']|sort }} {{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }}",
       "[1, 2, 3] 321 ['A', 'b', 'c'] [{'n': 1}, {'n': 2}]"),
    OK("{{ 'abc'|reverse }} {{ xs|reverse|list }}", "cba [2, 1, 3]"),
    OK("{{ '%s-%d'|format('a', 3) }} {{ '%s' % 'x' }} {{ '%05.1f|%x' % (3.14159, 255) }} {{ '%(a)s' % {'a': 1} }}",
       "a-3 x 003.1|ff 1"),
    OK("[{{ 'Hello'|center(9) }}]", "[  Hello  ]"),
    OK("[{{ messages|first|attr('role') }}] {{ namespace(a=1)|attr('a') }}", "[] 1"),
    ERR("{{ 1|nosuchfilter }}", "line 1, column 6: no filter named 'nosuchfilter'"),
    ERR("{{ 'abc'|truncate(2) }}", "the filter 'truncate' is not implemented"),
    ERR("{{ 5|length }}", "object of type 'int' has no len()"),
    ERR("{{ tools|length }}", "object of type 'NoneType' has no len()"),
    ERR("{{ 1|join }}", "'int' object is not iterable"),

    /* ---- tests ---- */
    OK("{{ nosuch is defined }} {{ messages is defined }} {{ nosuch is undefined }} {{ tools is defined }}"
       " {{ tools is none }} {{ none is not none }}",
       "False True True True True False"),
    OK("{{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }}"
       " {{ 'a' is number }}",
       "True False True True True False"),
    OK("{{ d is mapping }} {{ xs is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ d is iterable }}"
       " {{ 'a' is sequence }} {{ d is sequence }} {{ 1 is sequence }}",
       "True False True False True True True False"),
    OK("{{ 1 is equalto 1 }} {{ 1 is eq 2 }} {{ 2 is gt 1 }} {{ 'a' is in 'abc' }} {{ 2 is ne 2 }}",
       "True False True True False"),
    OK("{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ true is boolean }} {{ 1 is boolean }}",
       "True False True False True False"),
    OK("{{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 3 is odd }} {{ 4 is even }} {{ 6 is divisibleby 3 }}",
       "True False True True True True"),
    OK("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ range is callable }} {{ xs is callable }} {{ 'upper' is filter }}"
       " {{ 'odd' is test }} {{ 'nope' is filter }}",
       "True True True False True True False"),
    OK("{{ messages[0] is mapping }} {{ messages[9] is defined }} {{ messages[0].role is defined }}"
       " {{ messages[0].nope is defined }} {{ messages[3].content is string }}",
       "True False True False False"),
    OK("{{ none is sameas none }} {{ (messages[0]['role'] is string) and (messages|length > 1) }}", "True True"),
    ERR("{{ 1 is nosuchtest }}", "line 1, column 6: no test named 'nosuchtest'"),

    /* ---- methods ---- */
    OK("[{{ '  a  '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '  a '.lstrip() }}] [{{ 'abcba'.rstrip('ab') }}]"
       " [{{ 'xya'.lstrip('yx') }}] [{{ ' \\t\\na\\n'.rstrip() }}]",
       "[a] [a] [a ] [abc] [a] [ \t\na]"),
    OK("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}"
       " {{ 'a b'.split(none, 0) }} {{ ''.split(',') }} {{ ''.split() }}",
       "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c'] ['a b'] [''] []"),
    OK("{{ 'l1\\nl2\\r\\nl3'.splitlines() }} {{ 'x\\n'.splitlines(true) }}", "['l1', 'l2', 'l3'] ['x\\n']"),
    ERR("{{ 'a'.split('') }}", "empty separator"),
    OK("{{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.endswith(('x', 'y')) }}"
       " {{ 'abc'.startswith('b', 1) }}",
       "True True False True"),
    OK("{{ 'abC'.upper() }} {{ 'ABc'.lower() }} {{ \"they're\".title() }} {{ 'hI'.capitalize() }} {{ 'aB'.swapcase() }}",
       "ABC abc They'Re Hi Ab"),
    OK("{{ 'aaa'.replace('a', 'b', 1) }} {{ 'abc'.find('c') }} {{ 'abc'.find('z') }} {{ 'abca'.count('a') }}"
       " {{ 'abc'.index('b') }} {{ 'abcb'.rfind('b') }}",
       "baa 2 -1 2 1 3"),
    ERR("{{ 'abc'.index('z') }}", "substring not found"),
    OK("{{ '12'.isdigit() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} {{ 'ab'.isalpha() }} {{ 'Ab'.islower() }}",
       "True True True True False"),
    OK("[{{ 'a'.ljust(3) }}] [{{ 'a'.rjust(3, '*') }}] [{{ 'a'.center(4, '-') }}] [{{ '7'.zfill(3) }}] [{{ '-7'.zfill(4) }}]",
       "[a  ] [**a] [-a--] [007] [-007]"),
    OK("{{ ', '.join(['a', 'b']) }} {{ '-'.join('xyz') }}", "a, b x-y-z"),
    OK("{{ 'a=b=c'.partition('=') }} {{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }}",
       "('a', '=', 'b=c') bc ab"),
    OK("{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'def') }}"
       " {{ d.get('z') }}",
       "[('b', 1), ('a', 2)] ['b', 'a'] [1, 2] 2 def None"),
    OK("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "b=1;a=2;"),
    OK("{{ xs.index(1) }} {{ xs.count(3) }} {{ (1, 2).index(2) }}", "1 1 1"),
    ERR("{% set l = [] %}{{ l.append(1) }}", "SecurityError"),
    ERR("{% set l = [] %}{% set _ = l.append(1) %}", "access to attribute 'append' of 'list' object is unsafe"),
    ERR("{{ d.update({'c': 3}) }}", "unsafe"),
    ERR("{{ d.pop('a') }}", "unsafe"),
    OK("{{ '{} {}'.format('a', 1) }} {{ '{0}-{name}'.format('a', name='b') }} {{ '{:>4}|{:.2f}'.format('x', 3.14159) }}"
       " {{ '{{}}'.format() }}",
       "a 1 a-b    x|3.14 {}"),
    ERR("{{ 'abc'.nosuchmethod() }}", "'str object' has no attribute 'nosuchmethod'"),
    ERR("{{ 'abc'.strip(1) }}", "TypeError"),

    /* ---- subscripts and slices ---- */
    OK("{{ 'abc'[::-1] }} {{ [1, 2, 3, 4, 5][::-2] }} {{ 'abcdef'[1:-1] }} {{ 'abcdef'[-2:] }} {{ 'abcdef'[4:1:-1] }}"
       " {{ 'abcdef'[:2] }} {{ xs[1:] }} {{ 'abc'[5:] }}|{{ 'abc'[-10:2] }}",
       "cba [5, 3, 1] bcde ef edc ab [1, 2] |ab"),
    OK("{{ u[1:3] }} {{ u[::-1] }} {{ u[-2] }} {{ u[6:] }}",
       "\xc3\xa9l \xe6\x9c\xac\xe6\x97\xa5 oll\xc3\xa9h \xe6\x97\xa5 \xe6\x97\xa5\xe6\x9c\xac"),
    OK("{{ xs[-1] }} [{{ xs[5] }}] [{{ 'abc'[10] }}] {{ 'abc'[1] }} {{ d['a'] }} [{{ d['zz'] }}] {{ messages[-1].role }}",
       "2 [] [] b 2 [] user"),
    OK("{{ (messages|last).role }} {{ messages[1:]|length }} {{ messages[0]['content'] }}", "user 3 Be brief."),
    OK("{{ 'abc'[big:] }}|{{ 'abc'[small:] }}|{{ xs[small:big:2] }}|{{ xs[big:small:-1] }}", "|abc|[3, 2]|[2, 1, 3]"),
    ERR("{{ 'abc'[::0] }}", "slice step cannot be zero"),
    ERR("{{ xs[::0] }}", "slice step cannot be zero"),
    ERR("{{ xs['a':] }}", "slice indices must be integers"),
    ERR("{{ u[:nosuch] }}", "slice indices must be integers"),
    ERR("{{ d[1:] }}", "unhashable type: 'slice'"),
    OK("{{ xs[1::big] }} {{ u[1::big] }} {{ xs[::small] }} {{ u[-1::small] }} [{{ 5[1:] }}]", "[1] \xc3\xa9 [2] \xe6\x9c\xac []"),

    /* ---- loops ---- */
    OK("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
       "{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
       "10TrueFalse332|21FalseFalse321|32FalseTrue310|"),
    OK("{% for x in 'abc' %}{{ loop.previtem|default('^') }}{{ x }}{{ loop.nextitem|default('$') }} {% endfor %}",
       "^ab abc bc$ "),
    OK("{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", "ababa"),
    OK("{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}", "empty|1"),
    OK("{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }},{% endfor %}",
       "1:1/5,3:2/5,5:3/5,7:4/5,9:5/5,"),
    OK("{% for x in range(10) if x > 20 %}x{% else %}none{% endfor %}", "none"),
    OK("{% for x in range(10) %}{% if x == 5 %}{% break %}{% endif %}{% if x is even %}{% continue %}{% endif %}"
       "{{ x }}{% endfor %}",
       "13"),
    OK("{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }},{% endfor %}", "3,7,"),
    OK("{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}|{% endfor %}",
       "11a 21b 1|12a 22b 2|"),
    OK("{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% else %}"
       "{% for c in m.content %}{{ c.text }}{% endfor %}{% endif %}{% endfor %}",
       "<system>Be brief.<user>Hi there<assistant>Hello!<user>Bye"),
    OK("{% for k in d %}{{ k }}{% endfor %} {% for c in u %}.{% endfor %}", "ba ........"),
    OK("{% for x in nosuch %}x{% else %}e{% endfor %}", "e"),
    OK("{{ loop is defined }}{% for x in [1] %}{{ loop is defined }}{% endfor %}", "FalseTrue"),
    ERR("{% for x in 5 %}{% endfor %}", "'int' object is not iterable"),
    ERR("{% for a, b in [1] %}{% endfor %}", "cannot unpack"),
    ERR("{% break %}", "'break' outside loop"),

    /* ---- assignment and scope ---- */
    OK("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "21"),
    OK("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", "2"),
    OK("{% set ns = namespace(found=false, n=0) %}{% for i in [1, 2, 3] %}{% if i == 2 %}{% set ns.found = true %}"
       "{% endif %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.found }} {{ ns.n }}",
       "True 6"),
    OK("{% set ns = namespace() %}{% set ns.a = 'v' %}{{ ns.a }} [{{ ns.b }}] {{ ns.b is defined }}", "v [] False"),
    OK("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d) = [3, 4] %}{{ c }}{{ d }}", "1234"),
    OK("{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]", "[a2b]"),
    OK("{% set x | upper | trim %} abc {% endset %}[{{ x }}]", "[ABC]"),
    OK("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", "3[]"),
    OK("{% filter upper %}abc{{ 'd' }}{% endfilter %}", "ABCD"),
    OK("{% generation %}gen{% endgeneration %}", "gen"),
    OK("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}{% if none %}x{% elif '' %}y{% else %}z{% endif %}", "bz"),
    OK("{{ dict(a=1, b=[2])|tojson }} {{ dict()|length }}", "{\"a\": 1, \"b\": [2]} 0"),
    OK("{{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|length }}",
       "[1, 4, 7] [5, 3, 1] 0"),
    ERR("{% set x = {} %}{% set x.a = 1 %}", "non-namespace object"),
    ERR("{% set a, b = [1, 2, 3] %}", "too many values to unpack"),
    ERR("{{ range(1, 10, 0) }}", "must not be zero"),

    /* ---- macros ---- */
    OK("{% macro f(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, 2) }}|{{ f(b=3, a=4) }}|{{ f() }}",
       "1-d|1-2|4-3|-d"),
    OK("{% set x = 'outer' %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}", "outer"),
    OK("{% macro g(n) %}{% if n > 0 %}{{ n }}{{ g(n - 1) }}{% endif %}{% endmacro %}{{ g(3) }}", "321"),
    OK("{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}", "(1, 2){'k': 3}"),
    OK("{% macro m(x) %}[{{ x }}]{% endmacro %}{{ m('a') ~ m('b') }} {{ m('<')|length }}", "[a][b] 3"),
    ERR("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", "takes not more than 1 argument"),
    ERR("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}", "macro 'f' takes no keyword argument 'b'"),

    /* ---- whitespace control ---- */
    OK("a  {%- if true -%}  b  {%- endif -%}  c", "abc"),
    OK("a {{- 'b' -}} c", "abc"),
    OK("a {#- comment -#} b", "ab"),
    OK("{% if true %}\nx{% endif %}\ny", "xy"),
    OK("  {% if true %}x{% endif %}", "x"),
    OK("{% for x in [1, 2] %}\n{{ x }}\n{% endfor %}\n", "1\n2\n"),
    OK("  {%+ if true %}x{% endif %}", "  x"),
    OK("{% if true +%}\nx{% endif %}", "\nx"),
    OK("{{ 'x' }}\ny", "x\ny"),
    OK("  {# c #}\nx", "x"),
    OK("a\n", "a"),
    OK("a\n\n", "a\n"),
    OK("a\r\nb", "a\nb"),
    OK("{% raw %}{{ x }}{% if %}{% endraw %}", "{{ x }}{% if %}"),
    OK("  {% raw -%}  a  {%- endraw %}", "a"),
    OK("a{# c #}b{# {{ x }} #}c", "abc"),

    /* ---- globals: raise_exception, strftime_now ---- */
    {"{{ raise_exception('bad role: ' ~ messages[0].role) }}", NULL, "bad role: system", RAISED, NULL},
    {"{% if true %}{{ raise_exception('x') }}{% endif %}", NULL, "x", RAISED, NULL},
    OK("{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}"
       "|{{ strftime_now('%A %j %p %I') }}",
       "2026-01-15 10:00:00|15 Jan 2026|January 15, 2026|Thursday 015 AM 10"),
    OK("{{ strftime_now is defined }} {{ raise_exception is defined }} {{ namespace is defined }}", "True True True"),
    ERR("{{ strftime_now(1) }}", "must be str"),

    /* ---- undefined ---- */
    OK("[{{ nosuch }}] [{{ messages[0].nosuch }}] [{{ nosuch ~ 'a' }}] [{{ nosuch|length }}] [{{ nosuch == none }}]",
       "[] [] [a] [0] [False]"),
    OK("{% if nosuch %}y{% else %}n{% endif %} {{ nosuch is defined and nosuch.y }} {{ (nosuch or 'z') }}",
       "n False z"),
    OK("[{{ none.x }}] [{{ d.nosuch }}] [{{ 'abc'.nosuch }}]", "[] [] []"),
    ERR("{{ nosuch.y }}", "'nosuch' is undefined"),
    ERR("{{ messages[0].nosuch.deeper }}", "'dict object' has no attribute 'nosuch'"),
    ERR("{{ none.x.y }}", "'None' has no attribute 'x'"),
    ERR("{{ nosuch + 1 }}", "'nosuch' is undefined"),
    ERR("{{ nosuch() }}", "'nosuch' is undefined"),
    ERR("{{ xs[9].a }}", "has no such element"),
    ERR("{{ 1() }}", "'int' object is not callable"),

    /* ---- unicode ---- */
    OK("{{ '\\u00e9\\u00e8'|upper }} {{ '\\u0130'|length }} {{ '\\U0001F600'|length }} {{ '\\U0001F600x'[1:] }}",
       "\xc3\x89\xc3\x88 1 1 x"),
    OK("{{ 'stra\\u00dfe'|upper }} {{ '\\u0130'|lower|length }} {{ '\\u00dfa'|capitalize }} {{ 'a\\u00df'.title() }}"
       " {{ '\\u00dfa'|title }} {{ '\\ufb01x'.swapcase() }} {{ '\\u0130x'.swapcase()|length }} {{ '\\u0149'.upper() }}",
       "STRASSE 2 Ssa A\xc3\x9f SSa FIX 3 \xca\xbcN"),
    OK("{{ '\\u00e9t\\u00e9'|title }} {{ '\\u00e9a'|capitalize }} {{ u.split(' ') }}",
       "\xc3\x89t\xc3\xa9 \xc3\x89" "a ['h\xc3\xa9llo', '\xe6\x97\xa5\xe6\x9c\xac']"),
    OK("{{ '\\u3000a\\u3000'.strip() }} {{ 'a\\u00a0b'.split() }}", "a ['a', 'b']"),

    /* ---- syntax errors ---- */
    ERR("{{ x", "line 1, column 5: unexpected end of template"),
    ERR("{{ x }", "line 1, column 6: unexpected '}'"),
    ERR("{% if x %}", "Jinja was looking for the following tags: 'elif' or 'else' or 'endif'"),
    ERR("{% for x in y %}", "looking for the following tags: 'endfor' or 'else'"),
    ERR("{% endif %}", "Encountered unknown tag 'endif'"),
    ERR("{{ 'abc }}", "line 1, column 4: unexpected char \"'\""),
    ERR("a {# comment", "line 1, column 3: missing end of comment tag"),
    ERR("{% raw %}abc", "missing end of raw directive"),
    ERR("{% nosuchtag %}", "Encountered unknown tag 'nosuchtag'"),
    ERR("{{ 1 + }}", "unexpected 'end of print statement'"),
    ERR("{{ (1 }}", "unexpected '}'"),
    ERR("{{ [1, 2 }}", "unexpected '}'"),
    ERR("{{ f(a=1, 2) }}", "invalid syntax for function call expression"),
    ERR("{% macro %}{% endmacro %}", "expected name"),
    ERR("{% set %}", "Expected an expression, got 'end of statement block'"),
    ERR("{% include 'x' %}", "the 'include' tag is not supported"),
    ERR("{% extends 'x' %}", "the 'extends' tag is not supported"),
    ERR("{{ @ }}", "unexpected char '@'"),
    ERR("{% call f() %}x{% endcall %}", "the 'call' tag is not supported"),

    /* ---- 64-bit integers and other limits (Python's ints are unbounded) ---- */
    ERRL("{{ 99999999999999999999999 }}", "line 1, column 4: integer literal too large"),
    OK("{{ 0xAAA }} {{ 0xA_A }} {{ 0x_A }} {{ 0b101 }} {{ 0o17 }} {{ 0X1f }}", "2730 170 10 5 15 31"),
    ERRL("{{ 0x7fffffffffffffff }} {{ 0x8000000000000000 }}", "integer literal too large"),
    ERR("{{ 0xAAAg }}", "expected end of print statement, got 'g'"),
    ERR("{{ 0b102 }}", "expected end of print statement, got '2'"),
    /* fuzz_jinja: a control byte in a hex literal was taken for a digit ('\x10' | 0x20 is '0'): UB */
    ERR("{{ 0xAAA\x10" "AA }}", "unexpected char"),
    ERR("{{ 0b1\x11 }} {{ 0o7\x17 }}", "unexpected char"),
    OKL("{{ 9223372036854775807 }} {{ -9223372036854775807 - 1 }}", "9223372036854775807 -9223372036854775808"),
    ERRL("{{ big + 1 }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ small - 1 }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ big * 2 }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ 3037000500 * 3037000500 }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ 2 ** 63 }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ 3 ** 1000000 }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ -small }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ small|abs }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ small // -1 }}", "OverflowError: integer result out of the 64-bit range"),
    OKL("{{ small % -1 }} {{ big % -1 }} {{ 2 ** 62 }} {{ (-2) ** 63 }}", "0 0 4611686018427387904 -9223372036854775808"),
    ERRL("{{ [big, 1]|sum }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ 1e300|int }}", "OverflowError: int too large"),
    ERRL("{{ '99999999999999999999'|int }}", "OverflowError: int too large"),
    ERR("{{ (1e308 * 10)|int }}", "OverflowError: cannot convert float infinity to integer"),
    OK("{{ (1e308 * 10) }} {{ -(1e308 * 10) }} {{ 'nan'|float|int }} {{ 'inf'|float }}", "inf -inf 0 inf"),
    ERR("{{ range(10**9)|length }}", "Range too big"),
    ERR("{{ range(small, big)|length }}", "Range too big"),
    ERR("{{ range(0, big, 2)|list|length }}", "Range too big"),
    OK("{{ range(0, big, 2**61)|list }}", "[0, 2305843009213693952, 4611686018427387904, 6917529027641081856]"),
    OK("{{ range(big - 2, big)|list }} {{ range(small, small + 2)|list }}",
       "[9223372036854775805, 9223372036854775806] [-9223372036854775808, -9223372036854775807]"),
    ERRL("{{ 'ab' * 10**9 }}", "MemoryError"),
    ERRL("{{ [1, 2] * 10**9 }}", "MemoryError"),
    ERRL("{{ 'x' * big }}", "MemoryError"),
    ERRL("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
         "MemoryError"),
    ERRL("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "step limit"),
    ERRL("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
    ERRL("{% macro f(n) %}{% set x %}{{ f(n + 1) }}{% endset %}{% endmacro %}{{ f(0) }}", "RecursionError"),
    ERRL("{{ 'a'|center(10**10) }}", "MemoryError"),
    ERRL("{{ 'a'.ljust(10**10) }}", "MemoryError"),
    ERRL("{{ 'a'.zfill(big) }}", "MemoryError"),
    ERRL("{{ '%*d' % (3, 1) }}", "unsupported format (* width or precision)"),
    OK("{{ '%5d|%-4s|%.2s' % (42, 'a', 'xyz') }}", "   42|a   |xy"),
    ERRL("{{ '%999999999d' % 1 }}", "format width or precision too large"),
    ERRL("{{ '%.99999999999999999999999f' % 1.5 }}", "format width or precision too large"),
    ERRL("{{ '%99999999999999999999999s' % 1.5 }}", "format width or precision too large"),
    ERRL("{{ '{:>999999999}'.format(1) }}", "format width or precision too large"),
    ERRL("{{ '{:>9999999999999999999999}'.format(1) }}", "format width or precision too large"),
    ERRL("{{ '{:.9999999999999999999999}'.format(1.5) }}", "format width or precision too large"),
    ERRL("{{ 'x\\ny'|indent(10**9) }}", "indent: width too large"),
    OK("{{ 1.5|round(400) }} {{ 123.456|round(-1) }} {{ 123.456|round(-400) }} {{ -1.5|round(-400) }} {{ 1.5|round(-2) }}",
       "1.5 120.0 0.0 -0.0 0.0"),
    OK("{{ 15|round(-1) }} {{ 25|round(-1) }} {{ -15|round(-1) }} {{ 17|round(-1) }} {{ 7|round(-30) }} {{ 7|round(2) }}",
       "20 20 -20 20 0 7"),
    OKL("{{ small|round(-18) }} {{ small|round(-20) }}", "-9000000000000000000 0"),
    ERRL("{{ big|round(-19) }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ big|round(-1) }}", "OverflowError: integer result out of the 64-bit range"),
    ERRL("{{ [1]|batch(10**9, 0)|list }}", "MemoryError"),
    OK("{{ xs|batch(1)|list }} {{ []|batch(2)|list }} {{ xs|batch(3, 'x')|list }}", "[[3], [1], [2]] [] [[3, 1, 2]]"),
    OK("{{ xs|batch(0)|list }} {{ xs|batch(-1)|list }}", "[[], [3, 1, 2]] [[3, 1, 2]]"),
    OK("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self.self is defined }}", "True"),
    ERR("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns|tojson }}", "is not JSON serializable"),
};

/* ---- running a case ---- */

static json_t *parse_ctx(const char *ctx) {
    size_t n = strlen(ctx);
    char *s = malloc(n + 1);
    for (size_t i = 0; i <= n; i++) s[i] = ctx[i] == '\'' ? '"' : ctx[i];
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (!j) fprintf(stderr, "bad context JSON: %s: %s\n", e.text, s);
    free(s);
    return j;
}

/* Renders src with ctx: 0 and the output in *out, or -1 and the error in *out (malloc'd). */
static int render(const char *src, size_t n, const json_t *ctx, const struct dj_jinja_params *p, char **out,
                  size_t *out_n, bool *raised) {
    struct dj_jinja *t = NULL;
    *raised = false;
    if (jinja_compile(src, n, &t) != DJ_OK) {
        *out = strdup(dj_last_error());
        *out_n = strlen(*out);
        return -1;
    }
    struct dj_jinja_out o = {0};
    enum dj_status st = p ? jinja_render_ex(t, ctx, p, &o) : jinja_render(t, ctx, NOW_2026_01_15_10_00, &o);
    jinja_free(t);
    if (st != DJ_OK) {
        *raised = jinja_last_error_raised();
        *out = strdup(dj_last_error());
        *out_n = strlen(*out);
        return -1;
    }
    *out = malloc(o.n + 1);
    memcpy(*out, o.text, o.n + 1);
    *out_n = o.n;
    jinja_out_free(&o);
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_table(void) {
    json_t *def = parse_ctx(CTX);
    CHECK(def != NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct jcase *c = &cases[i];
        json_t *ctx = c->ctx ? parse_ctx(c->ctx) : json_incref(def);
        char *got;
        size_t got_n;
        bool raised;
        double t0 = now_s();
        int rc = render(c->src, strlen(c->src), ctx, NULL, &got, &got_n, &raised);
        double dt = now_s() - t0;
        json_decref(ctx);
        if (c->want) {
            CHECKF(rc == 0 && got_n == strlen(c->want) && !memcmp(got, c->want, got_n),
                   "case %zu: %s\n  want: [%s]\n  got%s: [%s]", i, c->src, c->want, rc ? " an error" : "", got);
        } else {
            CHECKF(rc != 0 && strstr(got, c->err), "case %zu: %s\n  want an error with: %s\n  got%s: [%s]", i, c->src,
                   c->err, rc ? " the error" : " a render", got);
            if (c->flags & RAISED) CHECKF(rc && raised && !strcmp(got, c->err), "case %zu: not raise_exception's own message: %s", i, got);
            else CHECKF(!raised, "case %zu: an error from raise_exception: %s", i, got);
        }
        /* the step-limit case does 5e7 steps: about a second at -O2, several under ASan */
        CHECKF(dt < 30.0, "case %zu took %.1f s", i, dt);
        free(got);
    }
    json_decref(def);
}

/* ---- hostile inputs built by code ---- */

static char *repeat(const char *pre, const char *unit, size_t times, const char *post) {
    size_t a = strlen(pre), u = strlen(unit), b = strlen(post);
    char *s = malloc(a + u * times + b + 1);
    memcpy(s, pre, a);
    for (size_t i = 0; i < times; i++) memcpy(s + a + u * i, unit, u);
    memcpy(s + a + u * times, post, b + 1);
    return s;
}

/* Compiling src (n bytes) fails with a message containing want. */
static void expect_compile_error(const char *what, const char *src, size_t n, const char *want) {
    struct dj_jinja *t = NULL;
    double t0 = now_s();
    enum dj_status st = jinja_compile(src, n, &t);
    double dt = now_s() - t0;
    CHECKF(st != DJ_OK && strstr(dj_last_error(), want), "%s: want an error with '%s', got %s", what, want,
           st == DJ_OK ? "a template" : dj_last_error());
    CHECKF(dt < 5.0, "%s: compiling took %.1f s", what, dt);
    jinja_free(t);
}

/* Renders src (n bytes) with the default context: fails with want, or renders exactly want_out. */
static void expect_render(const char *what, const char *src, size_t n, const char *want_err, const char *want_out,
                          size_t want_n) {
    json_t *ctx = parse_ctx(CTX);
    char *got;
    size_t got_n;
    bool raised;
    double t0 = now_s();
    int rc = render(src, n, ctx, NULL, &got, &got_n, &raised);
    double dt = now_s() - t0;
    if (want_err)
        CHECKF(rc != 0 && strstr(got, want_err), "%s: want an error with '%s', got%s: %.200s", what, want_err,
               rc ? " the error" : " a render", got);
    else
        CHECKF(rc == 0 && got_n == want_n && !memcmp(got, want_out, want_n), "%s: got%s: %.200s", what,
               rc ? " the error" : " a render", got);
    CHECKF(dt < 30.0, "%s: took %.1f s", what, dt);
    free(got);
    json_decref(ctx);
}

static void run_hostile(const char *shared) {
    char *s;
    s = repeat("{{ ", "[", 100000, " }}");
    expect_compile_error("10^5 '['", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("{{ ", "(", 100000, "1 }}");
    expect_compile_error("10^5 '('", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("{{ ", "{'a': ", 1000, "1 }}");
    expect_compile_error("10^3 '{'", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("{{ x", ".a", 100000, " }}");
    expect_compile_error("10^5 attributes", s, strlen(s), "too long");
    free(s);
    s = repeat("{{ 1", " + 1", 100000, " }}");
    expect_compile_error("10^5 additions", s, strlen(s), "too long");
    free(s);
    s = repeat("{{ x", "|trim", 100000, " }}");
    expect_compile_error("10^5 filters", s, strlen(s), "too long");
    free(s);
    s = repeat("{{ ", "not ", 100000, "1 }}");
    expect_compile_error("10^5 'not'", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("{{ ", "-", 100000, "1 }}");
    expect_compile_error("10^5 '-'", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("", "{% if 1 %}", 300, "x");
    expect_compile_error("300 nested ifs", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("", "{% for x in y %}", 300, "x");
    expect_compile_error("300 nested fors", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("{{ 1 if 1 else ", "1 if 1 else ", 100000, "1 }}");
    expect_compile_error("10^5 conditionals", s, strlen(s), "nested too deeply");
    free(s);
    s = repeat("{{ [", "1, ", 100000, "1]|length }}");
    expect_render("10^5 list items", s, strlen(s), NULL, "100001", 6);
    free(s);
    s = repeat("{{ nosuchfn(", "1, ", 100000, "1) }}");
    expect_render("10^5 arguments", s, strlen(s), "'nosuchfn' is undefined", NULL, 0);
    free(s);
    s = repeat("", "{{ 1 }}", 100000, "");
    char *ones = repeat("", "1", 100000, "");
    expect_render("10^5 outputs", s, strlen(s), NULL, ones, 100000);
    free(ones);
    free(s);

    /* NUL bytes are characters, as in Python */
    expect_render("NUL in data", "a\0b{{ 'c' }}", 12, NULL, "a\0bc", 4);
    expect_render("NUL in a string", "{{ 'x\0y'|length }}", 18, NULL, "3", 1);
    expect_compile_error("NUL in an expression", "{{ 1 \0 }}", 9, "unexpected char");
    /* invalid UTF-8 */
    expect_compile_error("a stray continuation byte", "ab\n\x80", 4, "line 2, column 1: invalid UTF-8");
    expect_compile_error("a cut sequence", "{{ '\xe6\x97' }}", 9, "invalid UTF-8");
    expect_compile_error("an overlong encoding", "\xc0\xaf", 2, "invalid UTF-8");
    expect_compile_error("a surrogate", "\xed\xa0\x80", 3, "invalid UTF-8");
    expect_compile_error("a code point past U+10FFFF", "\xf4\x90\x80\x80", 4, "invalid UTF-8");
    {
        /* the context's strings are checked by jansson; one with \u0000 is a string with a NUL */
        json_t *ctx = json_pack("{s:s#}", "z", "a\0b", (size_t)3);
        char *got;
        size_t got_n;
        bool raised;
        CHECK(render("{{ z|length }}{{ z }}", 21, ctx, NULL, &got, &got_n, &raised) == 0 && got_n == 4 &&
              !memcmp(got, "3a\0b", 4));
        free(got);
        json_decref(ctx);
    }
    expect_compile_error("a NULL source", NULL, 5, "no source");

    /* every prefix of a real template compiles or fails cleanly (and renders when it compiles) */
    size_t n = 0;
    char *src = test_read_file(test_shared_path(shared, "golden/chat_templates/templates/Qwen-Qwen3-0.6B.jinja"), &n);
    CHECK(src != NULL);
    json_t *ctx = parse_ctx(CTX);
    size_t n_ok = 0;
    for (size_t k = 0; src && k <= n; k += 7) {
        struct dj_jinja *t = NULL;
        if (jinja_compile(src, k, &t) == DJ_OK) {
            struct dj_jinja_out o = {0};
            if (jinja_render(t, ctx, NOW_2026_01_15_10_00, &o) == DJ_OK) n_ok++;
            jinja_out_free(&o);
            jinja_free(t);
        } else {
            CHECKF(strncmp(dj_last_error(), "template: line ", 15) == 0, "prefix %zu: %s", k, dj_last_error());
        }
    }
    CHECK(n_ok > 0);
    json_decref(ctx);
    free(src);
}

/* ---- the caller's limits ---- */

static void run_limits(void) {
    struct dj_jinja_params p = jinja_default_params();
    CHECK(p.max_steps == 50000000 && p.max_output == (size_t)64 << 20);
    json_t *ctx = json_object();
    char *got;
    size_t got_n;
    bool raised;
    const char *loop = "{% for i in range(1000) %}{% for j in range(100) %}{% endfor %}{% endfor %}ok";
    CHECK(render(loop, strlen(loop), ctx, &p, &got, &got_n, &raised) == 0 && !strcmp(got, "ok"));
    free(got);
    p.max_steps = 10000;
    CHECK(render(loop, strlen(loop), ctx, &p, &got, &got_n, &raised) != 0 && strstr(got, "step limit"));
    free(got);

    const char *big = "{{ 'x' * 5000 }}";
    p = jinja_default_params();
    CHECK(render(big, strlen(big), ctx, &p, &got, &got_n, &raised) == 0 && got_n == 5000);
    free(got);
    p.max_output = 4096;
    CHECK(render(big, strlen(big), ctx, &p, &got, &got_n, &raised) != 0 && strstr(got, "MemoryError"));
    free(got);
    const char *many = "{% for i in range(1000) %}{{ 'abcdefgh' }}{% endfor %}";
    CHECK(render(many, strlen(many), ctx, &p, &got, &got_n, &raised) != 0 && strstr(got, "output over 4096 bytes"));
    free(got);
    /* the limits never go above the built-in ones */
    p.max_steps = UINT64_MAX;
    p.max_output = SIZE_MAX;
    const char *spin = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    CHECK(render(spin, strlen(spin), ctx, &p, &got, &got_n, &raised) != 0 && strstr(got, "step limit"));
    free(got);
    /* O(n) work on a big value in a loop is charged per element or per 16 bytes: a million
     * steps end each of these in well under a second (each did 10^10 uncharged operations) */
    static const char *const ops[] = {
        "l|sum", "l|join", "l|tojson", "l|string", "l|max", "l|reverse|list", "l|map('string')|list",
        "l|select|list", "l|unique|list", "l|sort", "l.count(1)", "l < l", "l == l[:]", "-1 in l", "l|batch(7)|list",
        "s|upper", "s.split('x')", "s|list", "'y' in s", "s.find('y')", "s|trim", "s|replace('x', 'y')",
        "s|wordcount", "s.isalpha()", "s[::-1]", "s == s ~ ''", "s|first", "s.count('x')", "s.splitlines()",
    };
    p = jinja_default_params();
    p.max_steps = 1000000;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        char src[512];
        snprintf(src, sizeof src,
                 "{%% set l = range(100000)|list %%}{%% set s = 'x' * 100000 %%}"
                 "{%% for i in range(100000) %%}{%% set x = %s %%}{%% endfor %%}",
                 ops[i]);
        double t0 = now_s();
        int rc = render(src, strlen(src), ctx, &p, &got, &got_n, &raised);
        double dt = now_s() - t0;
        CHECKF(rc != 0 && strstr(got, "step limit"), "%s in a loop: %s", ops[i], got);
        /* linear, not quadratic (a quadratic one takes hours); the sanitizer build (-O0, shadow
         * memory) runs ~6x slower: 6.0 s was measured for replace there */
#ifdef DJ_SANITIZE_BUILD
        const double limit = 30.0;
#else
        const double limit = 5.0;
#endif
        CHECKF(dt < limit, "%s in a loop: %.1f s to reach a million steps", ops[i], dt);
        free(got);
    }
    /* now: strftime_now reads the params' clock */
    p = jinja_default_params();
    p.now = 0;
    const char *date = "{{ strftime_now('%Y-%m-%d %H:%M') }}";
    CHECK(render(date, strlen(date), ctx, &p, &got, &got_n, &raised) == 0 && !strcmp(got, "1970-01-01 00:00"));
    free(got);
    json_decref(ctx);
}

/* --dump: the cases as JSON lines {src, ctx, want | err, limit, raised}, for checking against jinja2. */
static void dump(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct jcase *c = &cases[i];
        json_t *ctx = parse_ctx(c->ctx ? c->ctx : CTX);
        json_t *o = json_pack("{s:s, s:o, s:b, s:b}", "src", c->src, "ctx", ctx, "limit", (c->flags & LIMIT) != 0,
                              "raised", (c->flags & RAISED) != 0);
        json_object_set_new(o, c->want ? "want" : "err", json_string(c->want ? c->want : c->err));
        char *line = json_dumps(o, JSON_COMPACT);
        printf("%s\n", line);
        free(line);
        json_decref(o);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--dump")) {
        dump();
        return 0;
    }
    const char *shared = argc > 1 ? argv[1] : "../shared";
    run_table();
    printf("%zu table cases\n", sizeof cases / sizeof cases[0]);
    run_hostile(shared);
    run_limits();
    TEST_END();
}
