#!/usr/bin/env python3
"""Fails when a function body in daemon/ or collectors/ is over the limit.

    tests/layering/function_length.py [--max LINES] [--top N] [ROOT]

A function's length is counted from the line of its opening brace to the
line of its closing brace, both included. Lambdas, local classes and
blocks inside a function count toward that function. The bodies of
namespaces, classes, structs, unions, enums and `extern "C"` are not
functions: the functions defined inside them are counted one by one.
Initializers (`T x = {...};`, `T x{...};`, a lambda that initializes a
variable at namespace scope) are not counted.

This is a brace-matching heuristic, not a parser: string and character
literals (raw strings included), comments and preprocessor lines are
blanked out first, and what precedes each brace decides what it opens.

Exits 1 listing each function over --max (120) lines, longest first;
0 when there is none. --top N also prints the N longest functions.
"""

import argparse
import re
import sys
from pathlib import Path

SCANNED = ("daemon", "collectors")
IDENT = re.compile(r"[A-Za-z0-9_]")


def end_of_quoted(src, i):
    """Where the literal opened by the quote at src[i] ends (one past its
    closing quote), an escaped quote taken as part of it; at the end of
    the line when it is not closed."""
    j = i + 1
    while j < len(src) and src[j] != src[i] and src[j] != "\n":
        j += 2 if src[j] == "\\" else 1
    return j + 1


def blank(src):
    """`src` with comments, literals and preprocessor lines turned into
    spaces; newlines are kept, so offsets and line numbers do not move."""
    out = list(src)
    n = len(src)
    i = 0
    line_start = True  # only whitespace since the last newline

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if line_start and c == "#":
            # A directive, with its backslash continuations.
            j = i
            while j < n:
                if src[j] == "\n" and src[j - 1] != "\\":
                    break
                j += 1
            wipe(i, j)
            i = j
            continue
        line_start = False
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == '"':
            # R"delim( ... )delim", with any encoding prefix before the R.
            k = i - 1
            while k >= 0 and IDENT.match(src[k]):
                k -= 1
            prefix = src[k + 1:i]
            if prefix in ("R", "u8R", "uR", "UR", "LR"):
                open_paren = src.find("(", i)
                delim = src[i + 1:open_paren]
                close = src.find(")" + delim + '"', open_paren)
                j = n if close < 0 else close + len(delim) + 2
            else:
                j = end_of_quoted(src, i)
            wipe(i, j)
            i = j
        elif c == "'":
            # A digit separator (1'000'000) when the token began with a digit.
            k = i - 1
            while k >= 0 and (IDENT.match(src[k]) or src[k] in "'."):
                k -= 1
            if k + 1 < i and src[k + 1].isdigit():
                i += 1
                continue
            j = end_of_quoted(src, i)
            wipe(i, j)
            i = j
        else:
            i += 1
    return "".join(out)


def match_brace(text, i):
    """Offset of the brace that closes the one at `i` (the end if none)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


ACCESS = re.compile(r"\b(public|protected|private)\s*:(?!:)")
OPERATOR = re.compile(r"\boperator\s*(\(\s*\)|\[\s*\]|[^\sA-Za-z0-9_(]+|\w[\w\s:<>*&]*?(?=\())")
TYPE_KEY = re.compile(r"^\s*(?:\[\[[^\]]*\]\]\s*)*(?:class|struct|union|enum)\b")


def strip_template(h):
    """`h` without a leading `template <...>`."""
    m = re.match(r"\s*template\s*<", h)
    if not m:
        return h
    depth = 1
    for j in range(m.end(), len(h)):
        if h[j] == "<":
            depth += 1
        elif h[j] == ">":
            depth -= 1
            if depth == 0:
                return strip_template(h[j + 1:])
    return h


def classify(header):
    """What a brace preceded by `header` (the text since the last `;`,
    `{` or `}` at namespace or class scope) opens: "scope", "function",
    "member-init" (a brace initializer in a constructor's init list) or
    "other" (an initializer)."""
    h = ACCESS.sub(" ", header)
    h = strip_template(h)
    if re.search(r"\bnamespace\b", h) or re.fullmatch(r"\s*extern\s*", h):
        return "scope"
    h = OPERATOR.sub("operator_ ", h)
    depth = 0
    has_parens = has_eq = False
    first_close = -1
    ctor_colon = False
    for k, c in enumerate(h):
        if c in "([":
            if depth == 0 and c == "(":
                has_parens = True
            depth += 1
        elif c in ")]":
            depth -= 1
            if depth == 0 and c == ")" and first_close < 0:
                first_close = k
        elif depth == 0 and c == "=":
            before = h[k - 1] if k > 0 else ""
            after = h[k + 1] if k + 1 < len(h) else ""
            if before not in "=!<>" and after != "=":
                has_eq = True
        elif depth == 0 and c == ":" and first_close >= 0:
            if (k == 0 or h[k - 1] != ":") and (k + 1 >= len(h) or h[k + 1] != ":"):
                ctor_colon = True
    if has_eq:
        return "other"
    if TYPE_KEY.match(h):
        return "scope"
    if not has_parens:
        return "other"
    tail = h.rstrip()
    if ctor_colon and tail and (IDENT.match(tail[-1]) or tail[-1] == ">"):
        return "member-init"
    return "function"


def functions(text):
    """(open offset, close offset, header) of each function body in the
    blanked source `text`."""
    found = []
    header_start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in ";}":
            header_start = i + 1
        elif c == "{":
            kind = classify(text[header_start:i])
            if kind == "scope":
                header_start = i + 1
            else:
                j = match_brace(text, i)
                if kind == "function":
                    found.append((i, j, text[header_start:i]))
                if kind != "member-init":
                    header_start = j + 1
                i = j
        i += 1
    return found


def scan(path):
    src = path.read_text(encoding="utf-8", errors="replace")
    text = blank(src)
    starts = [0]
    for k, c in enumerate(src):
        if c == "\n":
            starts.append(k + 1)

    def line_of(offset):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    for open_at, close_at, header in functions(text):
        first = line_of(open_at)
        length = line_of(close_at) - first + 1
        signature = " ".join(ACCESS.sub(" ", header).split())
        if len(signature) > 90:
            signature = "..." + signature[-87:]
        yield length, first, signature


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=Path(__file__).resolve().parents[2],
                        type=Path, help="the source tree (default: this script's)")
    parser.add_argument("--max", type=int, default=120, help="the most lines a body may have")
    parser.add_argument("--top", type=int, default=0, help="also print the N longest functions")
    args = parser.parse_args()

    found = []
    for top in SCANNED:
        for path in sorted((args.root / top).rglob("*.cpp")):
            rel = path.relative_to(args.root)
            for length, line, signature in scan(path):
                found.append((length, str(rel), line, signature))
    found.sort(key=lambda f: (-f[0], f[1], f[2]))

    if args.top:
        print(f"The {args.top} longest functions:")
        for length, rel, line, signature in found[:args.top]:
            print(f"  {length:4} {rel}:{line}: {signature}")
    over = [f for f in found if f[0] > args.max]
    if not over:
        print(f"{len(found)} functions, none over {args.max} lines")
        return 0
    print(f"{len(over)} function(s) over {args.max} lines; split them into functions that "
          "each state one step:")
    for length, rel, line, signature in over:
        print(f"  {length:4} {rel}:{line}: {signature}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
