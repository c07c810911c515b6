/*
 * api/json-parse.c: the JSON of QEMU's json: names, read as QEMU 7.2
 * reads it (its lexer, message streamer and parser: qobject/json-*.c),
 * into a tree json-flat.c flattens.
 *
 * Owns: ApiJson, the tree, and every message about the text.
 *
 * Facts learnt from QEMU 7.2 (each compared with qemu-img on json: names):
 *  1. Tokens: { } [ ] : , strings in double or single quotes, integers
 *     (-?(0|[1-9][0-9]*)), floats (with a fraction or an exponent),
 *     keywords ([a-z]+: true, false, null) and white space (space, tab,
 *     CR, LF).  In a string every byte 0x20..0xFD goes, an escape takes
 *     any one of them; a control character, 0xFE or 0xFF ends the token
 *     as an error.  A byte a token cannot take there is an error token
 *     from the token's start to that byte ("JSON parse error, stray
 *     '-}'"; at the end of the text, up to the end: "stray '\"x}'").
 *     After an error the lexer skips to a bracket or brace, a control
 *     character or 0xFE/0xFF, and starts again there.
 *  2. Messages: tokens are gathered until the brackets and braces
 *     opened since the first one are closed (or one closes more than
 *     were opened), then parsed as one value.  More than 1024 open at
 *     once is "JSON nesting depth limit exceeded"; a message of more
 *     than 2 Mi tokens or 64 MiB is "JSON token count limit exceeded" or
 *     "JSON token size limit exceeded".
 *  3. The first message's value or error is the answer; any message
 *     after a value is "Expecting at most one JSON value"; no message at
 *     all is "Expecting a JSON value".
 *  4. The parser's errors, the first one found: "premature EOI",
 *     "expecting value", "key is not a string in object", "missing : in
 *     object pair", "expected separator in dict", "expected separator in
 *     list", "duplicate key", "invalid keyword 'tru'"; in strings
 *     "invalid escape sequence in string" (escapes: \" \' \\ \/ \b \f \n
 *     \r \t \uXXXX), "\ud83d is not a valid Unicode character" (the
 *     escape's six bytes, or twelve for a surrogate pair, as far as the
 *     token goes) and "invalid UTF-8 sequence in string".  Each but the
 *     stray and limit ones is prefixed "JSON parse error, ".
 *  5. Strings are modified UTF-8 of code points that are neither
 *     surrogates nor noncharacters, at most U+10FFFF, in their shortest
 *     form; U+0000 (\u0000 or the bytes C0 80) is the bytes C0 80 in the
 *     string, so a name never ends early.  A surrogate pair in \u escapes
 *     is one code point.
 *  6. An integer is an int64 when it fits, else another number, as a
 *     float is (QEMU keeps them as a uint64 or a double).
 *
 * Invariants:
 *  1. Nothing here recurses deeper than fact 2's limit: the parser only
 *     sees messages the nesting check let through.
 *  2. Every error is set once, the first (fact 3, 4); the tree of a
 *     failed parse is freed.
 */
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_NESTING 1024        /* fact 2 */
#define JSON_MAX_TOKENS (2u << 20)   /* fact 2 */
#define JSON_MAX_BYTES (64ull << 20) /* fact 2 */

typedef enum TokType {
    TOK_LCURLY,
    TOK_RCURLY,
    TOK_LSQUARE,
    TOK_RSQUARE,
    TOK_COLON,
    TOK_COMMA,
    TOK_INTEGER,
    TOK_FLOAT,
    TOK_KEYWORD,
    TOK_STRING,
} TokType;

typedef struct Token {
    TokType type;
    char *text; /* the bytes of the token as written */
} Token;

/* Lexer states (fact 1); a token is done when a byte does not continue it. */
typedef enum LexState {
    LX_START,
    LX_DQ,
    LX_DQ_ESC,
    LX_SQ,
    LX_SQ_ESC,
    LX_ZERO,
    LX_DIGITS,
    LX_SIGN,
    LX_MANTISSA,
    LX_MANTISSA_DIGITS,
    LX_EXP_E,
    LX_EXP_SIGN,
    LX_EXP_DIGITS,
    LX_KEYWORD,
    LX_RECOVERY,
} LexState;

typedef struct Reader {
    GPtrArray *tokens;    /* Token*, the current message (fact 2) */
    int braces, brackets; /* open in the message */
    uint64_t bytes;
    ApiJson *result; /* fact 3 */
    GError *err;
} Reader;

static void token_free(gpointer p)
{
    Token *t = p;
    g_free(t->text);
    g_free(t);
}

void api_json_free(ApiJson *v)
{
    if (!v) {
        return;
    }
    g_free(v->str);
    if (v->members) {
        g_ptr_array_unref(v->members);
    }
    g_free(v->key);
    g_free(v);
}

static ApiJson *json_new(ApiJsonType type)
{
    ApiJson *v = g_new0(ApiJson, 1);
    v->type = type;
    if (type == API_JSON_OBJECT || type == API_JSON_ARRAY) {
        v->members = g_ptr_array_new_with_free_func((GDestroyNotify)api_json_free);
    }
    return v;
}

/* ---- the parser (fact 4), over one message's tokens ---- */

typedef struct Parser {
    GPtrArray *tokens;
    guint next;
    GError *err; /* invariant 2: the first error only */
} Parser;

static void perr(Parser *p, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static void perr(Parser *p, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *msg = NULL;

    if (p->err) {
        return;
    }
    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    p->err = g_error_new(QIMG_ERROR, EINVAL, "JSON parse error, %s", msg);
}

static Token *peek(Parser *p)
{
    return p->next < p->tokens->len ? p->tokens->pdata[p->next] : NULL;
}

static Token *pop(Parser *p)
{
    Token *t = peek(p);
    p->next += t != NULL;
    return t;
}

/* Fact 5: the valid code points. */
static bool code_point_ok(int64_t cp)
{
    return cp >= 0 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF) &&
           !(cp >= 0xFDD0 && cp <= 0xFDEF) && (cp & 0xFFFE) != 0xFFFE;
}

/* Fact 5: the code point of the modified UTF-8 at s (up to the NUL), -1
 * when it is none; *end past what was read. */
static int64_t mod_utf8(const unsigned char *s, const unsigned char **end)
{
    static const int64_t least[] = {0x80, 0x800, 0x10000, 0x200000, 0x4000000};
    unsigned len = 0;
    int64_t cp;

    *end = s + 1;
    if (s[0] < 0x80) {
        return s[0];
    }
    if (s[0] >= 0xFE || !(s[0] & 0x40)) {
        return -1; /* 0xFE, 0xFF, or a continuation byte first */
    }
    for (unsigned mask = 0x80; s[0] & mask; mask >>= 1) {
        len++;
    }
    cp = s[0] & ((0x80u >> len) - 1);
    for (unsigned i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *end = s + i;
            return -1;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *end = s + len;
    if (!code_point_ok(cp) || (cp < least[len - 2] && !(cp == 0 && len == 2))) {
        return -1;
    }
    return cp;
}

/* Fact 5: cp (valid) as modified UTF-8. */
static void put_code_point(GString *out, int64_t cp)
{
    if (cp == 0) {
        g_string_append_len(out, "\xC0\x80", 2);
    } else {
        g_string_append_unichar(out, (gunichar)cp);
    }
}

static int64_t hex4(const char *s)
{
    int64_t v = 0;

    for (int i = 0; i < 4; i++) {
        if (!g_ascii_isxdigit(s[i])) {
            return -1;
        }
        v = v * 16 + g_ascii_xdigit_value(s[i]);
    }
    return v;
}

/* Fact 4, 5: the string of a string token, or NULL (p->err set). */
static char *parse_string(Parser *p, const Token *t)
{
    g_autoptr(GString) out = g_string_new(NULL);
    const char quote = t->text[0];
    const char *s = t->text + 1;

    while (*s != quote && *s) {
        if (*s != '\\') {
            const unsigned char *end;
            int64_t cp = mod_utf8((const unsigned char *)s, &end);
            if (cp < 0) {
                perr(p, "invalid UTF-8 sequence in string");
                return NULL;
            }
            put_code_point(out, cp);
            s = (const char *)end;
            continue;
        }
        const char *esc = strchr("\"'\\/bfnrt", s[1]);
        if (s[1] != '\0' && esc) {
            static const char plain[] = "\"'\\/\b\f\n\r\t";
            g_string_append_c(out, plain[esc - "\"'\\/bfnrt"]);
            s += 2;
            continue;
        }
        if (s[1] != 'u') {
            perr(p, "invalid escape sequence in string");
            return NULL;
        }
        /* \u: the span the message shows stops at the token's end */
        int64_t cp = hex4(s + 2);
        int span = 6;
        if (cp >= 0xD800 && cp <= 0xDBFF && s[6] == '\\' && s[7] == 'u') {
            int64_t lo = hex4(s + 8);
            cp = lo >= 0xDC00 && lo <= 0xDFFF
                     ? 0x10000 + ((cp & 0x3FF) << 10) + (lo & 0x3FF)
                     : -1;
            span = cp < 0 ? 6 : 12;
        }
        if (!code_point_ok(cp)) {
            perr(p, "%.*s is not a valid Unicode character", span, s);
            return NULL;
        }
        put_code_point(out, cp);
        s += span;
    }
    return g_string_free(g_steal_pointer(&out), FALSE);
}

static ApiJson *parse_value(Parser *p);

static ApiJson *parse_literal(Parser *p, const Token *t)
{
    ApiJson *v;

    if (t->type == TOK_STRING) {
        char *str = parse_string(p, t);
        if (!str) {
            return NULL;
        }
        v = json_new(API_JSON_STRING);
        v->str = str;
        return v;
    }
    if (t->type == TOK_KEYWORD) {
        if (strcmp(t->text, "true") == 0 || strcmp(t->text, "false") == 0) {
            v = json_new(API_JSON_BOOL);
            v->b = t->text[0] == 't';
            return v;
        }
        if (strcmp(t->text, "null") == 0) {
            return json_new(API_JSON_NULL);
        }
        perr(p, "invalid keyword '%s'", t->text);
        return NULL;
    }
    /* fact 6 */
    if (t->type == TOK_INTEGER) {
        char *end;
        errno = 0;
        long long i = strtoll(t->text, &end, 10);
        if (errno == 0 && *end == '\0') {
            v = json_new(API_JSON_INT);
            v->i = i;
            return v;
        }
    }
    v = json_new(API_JSON_NUMBER);
    v->str = g_strdup(t->text);
    return v;
}

static ApiJson *parse_object(Parser *p)
{
    g_autoptr(ApiJson) obj = json_new(API_JSON_OBJECT);
    Token *t;

    pop(p); /* { */
    if (!peek(p)) {
        perr(p, "premature EOI");
        return NULL;
    }
    if (peek(p)->type == TOK_RCURLY) {
        pop(p);
        return g_steal_pointer(&obj);
    }
    for (;;) {
        if (!peek(p)) {
            perr(p, "premature EOI");
            return NULL;
        }
        g_autoptr(ApiJson) key = parse_value(p);
        if (!key || key->type != API_JSON_STRING) {
            perr(p, "key is not a string in object");
            return NULL;
        }
        t = pop(p);
        if (!t) {
            perr(p, "premature EOI");
            return NULL;
        }
        if (t->type != TOK_COLON) {
            perr(p, "missing : in object pair");
            return NULL;
        }
        ApiJson *val = parse_value(p);
        if (!val) {
            perr(p, "Missing value in dict");
            return NULL;
        }
        for (guint i = 0; i < obj->members->len; i++) {
            if (strcmp(((ApiJson *)obj->members->pdata[i])->key, key->str) == 0) {
                api_json_free(val);
                perr(p, "duplicate key");
                return NULL;
            }
        }
        val->key = g_steal_pointer(&key->str);
        g_ptr_array_add(obj->members, val);
        t = pop(p);
        if (!t) {
            perr(p, "premature EOI");
            return NULL;
        }
        if (t->type == TOK_RCURLY) {
            return g_steal_pointer(&obj);
        }
        if (t->type != TOK_COMMA) {
            perr(p, "expected separator in dict");
            return NULL;
        }
    }
}

static ApiJson *parse_array(Parser *p)
{
    g_autoptr(ApiJson) arr = json_new(API_JSON_ARRAY);
    Token *t;

    pop(p); /* [ */
    if (!peek(p)) {
        perr(p, "premature EOI");
        return NULL;
    }
    if (peek(p)->type == TOK_RSQUARE) {
        pop(p);
        return g_steal_pointer(&arr);
    }
    for (;;) {
        ApiJson *item = parse_value(p);
        if (!item) {
            perr(p, "expecting value");
            return NULL;
        }
        g_ptr_array_add(arr->members, item);
        t = pop(p);
        if (!t) {
            perr(p, "premature EOI");
            return NULL;
        }
        if (t->type == TOK_RSQUARE) {
            return g_steal_pointer(&arr);
        }
        if (t->type != TOK_COMMA) {
            perr(p, "expected separator in list");
            return NULL;
        }
    }
}

/* Invariant 1: depth is bounded by the message's nesting check. */
static ApiJson *parse_value(Parser *p)
{
    Token *t = peek(p);

    if (!t) {
        perr(p, "premature EOI");
        return NULL;
    }
    switch (t->type) {
    case TOK_LCURLY:
        return parse_object(p);
    case TOK_LSQUARE:
        return parse_array(p);
    case TOK_INTEGER:
    case TOK_FLOAT:
    case TOK_STRING:
    case TOK_KEYWORD:
        return parse_literal(p, pop(p));
    default:
        perr(p, "expecting value");
        return NULL;
    }
}

/* ---- messages (facts 2, 3) ---- */

/* Fact 3: one message's value or error. */
static void emit(Reader *r, ApiJson *v, GError *err)
{
    g_ptr_array_set_size(r->tokens, 0);
    r->braces = r->brackets = 0;
    r->bytes = 0;
    if (r->result) {
        api_json_free(g_steal_pointer(&r->result));
        api_json_free(v);
        g_clear_error(&err);
        r->err = g_error_new(QIMG_ERROR, EINVAL, "Expecting at most one JSON value");
    } else if (r->err) {
        api_json_free(v);
        g_clear_error(&err);
    } else if (err) {
        r->err = err;
    } else {
        r->result = v;
    }
}

static void parse_message(Reader *r)
{
    Parser p = {.tokens = r->tokens};
    ApiJson *v = parse_value(&p);

    if (v && p.err) {
        api_json_free(g_steal_pointer(&v));
    }
    emit(r, v, p.err);
}

static void message_error(Reader *r, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static void message_error(Reader *r, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *msg = NULL;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    emit(r, NULL, g_error_new_literal(QIMG_ERROR, EINVAL, msg));
}

/* Fact 2: a token joins the message, which is parsed once it closes. */
static void take_token(Reader *r, TokType type, const char *text, size_t len)
{
    Token *t;

    r->braces += type == TOK_LCURLY ? 1 : type == TOK_RCURLY ? -1 : 0;
    r->brackets += type == TOK_LSQUARE ? 1 : type == TOK_RSQUARE ? -1 : 0;
    if (r->bytes + len + 1 > JSON_MAX_BYTES) {
        message_error(r, "JSON token size limit exceeded");
        return;
    }
    if (r->tokens->len + 1 > JSON_MAX_TOKENS) {
        message_error(r, "JSON token count limit exceeded");
        return;
    }
    if (r->braces + r->brackets > JSON_MAX_NESTING) {
        message_error(r, "JSON nesting depth limit exceeded");
        return;
    }
    t = g_new(Token, 1);
    t->type = type;
    t->text = g_strndup(text, len);
    r->bytes += len;
    g_ptr_array_add(r->tokens, t);
    if ((r->braces > 0 || r->brackets > 0) && r->braces >= 0 && r->brackets >= 0) {
        return;
    }
    parse_message(r);
}

/* ---- the lexer (fact 1) ---- */

static bool is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* The end of the string token at s[i] (its quote), or (error) -1 with *bad
 * past the byte it cannot take, or at n when the text ends in it. */
static int64_t scan_string(const unsigned char *s, size_t i, size_t n, size_t *bad)
{
    const unsigned char quote = s[i];

    for (size_t j = i + 1; j < n; j++) {
        if (s[j] < 0x20 || s[j] > 0xFD) {
            *bad = j + 1;
            return -1;
        }
        if (s[j] == quote) {
            return (int64_t)j + 1;
        }
        if (s[j] == '\\' && ++j < n && (s[j] < 0x20 || s[j] > 0xFD)) {
            *bad = j + 1; /* an escape takes any byte a string takes */
            return -1;
        }
    }
    *bad = n;
    return -1;
}

/* Digits from s[j]: past them; at least one, else (error) -1 with *bad. */
static int64_t scan_digits(const unsigned char *s, size_t j, size_t n, size_t *bad)
{
    if (j >= n || !is_digit(s[j])) {
        *bad = MIN(j + 1, n);
        return -1;
    }
    while (j < n && is_digit(s[j])) {
        j++;
    }
    return (int64_t)j;
}

/* The end of the number token at s[i], its type in *type, or (error) -1. */
static int64_t scan_number(const unsigned char *s, size_t i, size_t n, TokType *type,
                           size_t *bad)
{
    size_t j = i + (s[i] == '-');
    int64_t e;

    *type = TOK_INTEGER;
    if (j < n && s[j] == '0') {
        j++;
        if (j < n && is_digit(s[j])) {
            *bad = j + 1; /* no leading zero */
            return -1;
        }
    } else if ((e = scan_digits(s, j, n, bad)) < 0) {
        return -1;
    } else {
        j = (size_t)e;
    }
    if (j < n && s[j] == '.') {
        *type = TOK_FLOAT;
        if ((e = scan_digits(s, j + 1, n, bad)) < 0) {
            return -1;
        }
        j = (size_t)e;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        *type = TOK_FLOAT;
        j += 1 + (j + 1 < n && (s[j + 1] == '+' || s[j + 1] == '-'));
        if ((e = scan_digits(s, j, n, bad)) < 0) {
            return -1;
        }
        j = (size_t)e;
    }
    return (int64_t)j;
}

/* After an error: the next byte the lexer starts again at (fact 1). */
static size_t recover(const unsigned char *s, size_t j, size_t n)
{
    while (j < n &&
           !((s[j] < 0x20 && s[j] != '\t') || s[j] >= 0xFE || strchr("[]{}", s[j]))) {
        j++;
    }
    return j;
}

static TokType structural(unsigned char c)
{
    return c == '{'   ? TOK_LCURLY
           : c == '}' ? TOK_RCURLY
           : c == '[' ? TOK_LSQUARE
           : c == ']' ? TOK_RSQUARE
           : c == ':' ? TOK_COLON
                      : TOK_COMMA;
}

/* Fact 1: the tokens of text into r's messages. */
static void lex(Reader *r, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    const size_t n = strlen(text);

    for (size_t i = 0; i < n;) {
        const unsigned char c = s[i];
        TokType type = TOK_KEYWORD;
        size_t bad = i + 1;
        int64_t end = -1;

        if (is_space(c)) {
            i++;
            continue;
        }
        if (strchr("{}[],:", c)) {
            take_token(r, structural(c), text + i, 1);
            i++;
            continue;
        }
        if (c == '"' || c == '\'') {
            type = TOK_STRING;
            end = scan_string(s, i, n, &bad);
        } else if (c == '-' || is_digit(c)) {
            end = scan_number(s, i, n, &type, &bad);
        } else if (c >= 'a' && c <= 'z') {
            for (end = (int64_t)i; (size_t)end < n && s[end] >= 'a' && s[end] <= 'z';) {
                end++;
            }
        }
        if (end < 0) {
            message_error(r, "JSON parse error, stray '%.*s'", (int)(bad - i), text + i);
            i = recover(s, bad, n);
            continue;
        }
        take_token(r, type, text + i, (size_t)end - i);
        i = (size_t)end;
    }
    if (r->tokens->len > 0) {
        parse_message(r); /* the end of the text ends the message */
    }
}

ApiJson *api_json_parse(const char *text, GError **error)
{
    Reader r = {.tokens = g_ptr_array_new_with_free_func(token_free)};

    lex(&r, text);
    g_ptr_array_unref(r.tokens);
    if (r.err) {
        api_json_free(r.result);
        g_propagate_error(error, r.err);
        return NULL;
    }
    if (!r.result) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Expecting a JSON value");
    }
    return r.result;
}
