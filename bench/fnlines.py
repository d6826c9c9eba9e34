#!/usr/bin/env python3
"""Lines per file and per function of some crates, test code left out.

Usage: python3 bench/fnlines.py [--top N] [--files] [--against OTHER_REPO] REPO_DIR crate [crate...]

Reads REPO_DIR/crates/<crate>/src/**.rs (or REPO_DIR/<crate>/src). Test code is not counted:
every item under a #[cfg(test)] attribute (a `mod tests { ... }`, a test-only fn or use) and
the files of `#[cfg(test)] mod x;` declarations. A function's length is its lines from the
`fn` line to the line of its closing brace (attributes and doc comments above it not
counted; a nested fn counts in its own length and in its parent's). Braces are matched on
the source with comments, strings and char literals blanked, so braces in them do not count.
"Code" lines are those with something left once comments are blanked.

Prints a per-crate summary, the functions over 120 and over 100 lines, the longest N (15),
and with --files every file (path, lines, code lines, functions, longest). With --against,
the summary of OTHER_REPO (the same crates) is printed beside REPO_DIR's, as before/after.
"""
import argparse
import os
import re
import signal
import statistics
import sys


def blank(text):
    """`text` with comments blanked to spaces and the insides of string and char literals
    to 'x' (newlines kept everywhere, so line numbers hold)."""
    out = []
    i, n = 0, len(text)

    def keep_newlines(s, fill):
        return ''.join(c if c == '\n' else fill for c in s)

    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith('/*', j):
                    depth, j = depth + 1, j + 2
                elif text.startswith('*/', j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_newlines(text[i:j], ' '))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:i + 300])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            close = '"' + m.group(1)
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append(m.group(0) + keep_newlines(text[i + m.end():j], 'x'))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append('"' + keep_newlines(text[i + 1:j], 'x') + '"')
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '{') or a lifetime / label ('a, 'static).
            if i + 1 < n and text[i + 1] == '\\':
                j = i + 2
                while j < n and text[j] != "'":
                    j += 1
                out.append("'" + 'x' * (j - i - 1) + "'")
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'" and text[i + 1] != '\n':
                out.append("'x'")
                i += 3
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def line_of(starts, pos):
    """1-based line of offset `pos`, `starts` being the offsets where lines start."""
    lo, hi = 0, len(starts)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if starts[mid] <= pos:
            lo = mid
        else:
            hi = mid
    return lo + 1


ITEM = re.compile(r'\s*(?:#\[[^\]]*\]\s*)*(?:pub\b|fn\b|mod\b|impl\b|use\b|struct\b|enum\b|const\b|static\b'
                  r'|type\b|trait\b|unsafe\b|async\b|extern\b|macro_rules\b|union\b)')


def item_end(src, pos, item=None):
    """Offset just past the item starting at `pos`: past its first `;` or its block's
    closing brace, whichever comes first outside () and [] (an item: fn, mod, impl, use...).
    Anything else (a field, a statement, an expression) ends at its first `,` or `;`, or
    before the bracket that closes what holds it."""
    if item is None:
        item = ITEM.match(src, pos) is not None
    depth, i, n = 0, pos, len(src)
    while i < n:
        c = src[i]
        if c in '([' or (c == '<' and not item):
            depth += 1
        elif c in ')]' or (c == '>' and not item and src[i - 1] != '-'):
            depth -= 1
            if depth < 0:
                return i, False
        elif depth == 0 and (c == ';' or (c == ',' and not item)):
            return i + 1, False
        elif depth == 0 and c == '{':
            return match_brace(src, i) + 1, True
        elif depth == 0 and c == '}':
            return i, False
        i += 1
    return n, False


def match_brace(src, i):
    depth = 0
    for j in range(i, len(src)):
        if src[j] == '{':
            depth += 1
        elif src[j] == '}':
            depth -= 1
            if depth == 0:
                return j
    return len(src) - 1


TEST_ATTR = re.compile(r'#\[cfg\((?:all\()?\s*test\b[^\]]*\]')
FN = re.compile(r'\bfn\s+(\w+)')
IMPL = re.compile(r'\b(impl|trait)\b')


def analyse(path):
    """(lines, code lines, [(fn length, first line, qualified name)], test files excluded)."""
    text = open(path, encoding='utf-8', errors='replace').read()
    src = blank(text)
    starts = [0] + [m.end() for m in re.finditer('\n', src)]
    nlines = len(starts) - (1 if src.endswith('\n') else 0)
    # Test items: blanked out entirely (lines kept, so they count as removed).
    test_lines = set()
    test_files = []
    for m in TEST_ATTR.finditer(src):
        if src[m.start():m.end()].strip() and m.start() >= 0 and src[m.start()] == '#':
            end, has_block = item_end(src, m.end())
            head = src[m.end():end]
            decl = re.match(r'\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', head)
            if decl:
                test_files.append(decl.group(1))
            a, b = line_of(starts, m.start()), line_of(starts, end - 1)
            test_lines.update(range(a, b + 1))
    if test_lines:
        lines = src.split('\n')
        for ln in test_lines:
            if ln - 1 < len(lines):
                lines[ln - 1] = ' ' * len(lines[ln - 1])  # offsets kept
        src = '\n'.join(lines)
    # impl and trait blocks: (start, end, name), for naming functions Type::name.
    blocks = []
    for m in IMPL.finditer(src):
        before = src[:m.start()].rstrip()
        if before and before[-1] not in '{};]' and not before.endswith(('unsafe', 'default')):
            continue  # `-> impl Trait`, `x: impl Fn`: not an item
        j = m.end()
        depth = 0
        while j < len(src) and not (src[j] in '{;' and depth == 0):
            depth += src[j] in '([<'
            depth -= src[j] in ')]>' and not (src[j] == '>' and src[j - 1] == '-')
            j += 1
        if j >= len(src) or src[j] != '{':
            continue
        head = src[m.end():j]
        if m.group(1) == 'impl':
            head = re.sub(r'^\s*<', '<', head)
            if head.startswith('<'):  # impl<T: X<Y>> ...: drop the generics
                d, k = 0, 0
                for k, ch in enumerate(head):
                    d += ch == '<'
                    d -= ch == '>' and head[k - 1] != '-'
                    if d == 0:
                        break
                head = head[k + 1:]
            head = re.split(r'\bwhere\b', head)[0]
            parts = re.split(r'\bfor\b', head)
            ty = parts[-1] if len(parts) > 1 else parts[0]
            names = re.findall(r'[A-Za-z_]\w*', re.sub(r'<.*', '', ty, flags=re.S))
            name = names[-1] if names else '?'
        else:
            name = (re.findall(r'\w+', head) or ['?'])[0]
        blocks.append((j, match_brace(src, j), name))
    fns = []
    for m in FN.finditer(src):
        end, has_block = item_end(src, m.end(), item=True)
        if not has_block:
            continue  # a declaration: `fn x(&self);`
        inside = [b for b in blocks if b[0] < m.start() < b[1]]
        name = m.group(1)
        if inside:
            name = max(inside, key=lambda b: b[0])[2] + '::' + name
        a, b = line_of(starts, m.start()), line_of(starts, end - 1)
        fns.append((b - a + 1, a, name))
    lines = src.split('\n')[:nlines]
    kept = nlines - len([ln for ln in test_lines if ln <= nlines])
    code = sum(1 for i, l in enumerate(lines, 1) if l.strip() and i not in test_lines)
    return kept, code, fns, test_files


def crate_files(repo, crate):
    for src in (os.path.join(repo, 'crates', crate, 'src'), os.path.join(repo, crate, 'src')):
        if os.path.isdir(src):
            break
    else:
        sys.exit('fnlines: no crates/%s/src or %s/src in %s' % (crate, crate, repo))
    files = {}
    excluded = set()
    for d, _, names in os.walk(src):
        for f in sorted(names):
            if f.endswith('.rs'):
                p = os.path.join(d, f)
                files[p] = analyse(p)
    for p, (_, _, _, tests) in files.items():
        base = os.path.dirname(p)
        stem = os.path.basename(p)[:-3]
        if stem not in ('mod', 'lib', 'main'):
            base = os.path.join(base, stem)
        for t in tests:
            excluded.add(os.path.join(base, t + '.rs'))
            excluded.add(os.path.join(base, t, 'mod.rs'))
            for d, _, names in os.walk(os.path.join(base, t)):
                excluded.update(os.path.join(d, f) for f in names)
    return {p: v for p, v in files.items() if p not in excluded}


def summary(repo, crates):
    rows, allfns, perfile = [], [], []
    for c in crates:
        files = crate_files(repo, c)
        fns = [(n, os.path.relpath(p, repo), a, name) for p, (_, _, fs, _) in files.items() for n, a, name in fs]
        lens = [f[0] for f in fns]
        rows.append((c, len(files), sum(v[0] for v in files.values()), sum(v[1] for v in files.values()),
                     len(fns), statistics.mean(lens) if lens else 0, statistics.median(lens) if lens else 0,
                     max(lens, default=0), sum(n > 100 for n in lens), sum(n > 120 for n in lens)))
        allfns += fns
        for p, (lines, code, fs, _) in sorted(files.items()):
            perfile.append((os.path.relpath(p, repo), lines, code, len(fs), max((f[0] for f in fs), default=0)))
    return rows, allfns, perfile


HEAD = ['crate', 'files', 'lines', 'code', 'fns', 'mean', 'median', 'max', '>100', '>120']


def fmt(row):
    return [row[0]] + ['%d' % x for x in row[1:5]] + ['%.1f' % row[5], '%g' % row[6]] + ['%d' % x for x in row[7:]]


def total(rows):
    if not rows:
        return None
    return ('total', sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[3] for r in rows),
            sum(r[4] for r in rows), None, None, max(r[7] for r in rows), sum(r[8] for r in rows),
            sum(r[9] for r in rows))


def table(rows, fns):
    t = total(rows)
    lens = [f[0] for f in fns]
    t = t[:5] + (statistics.mean(lens) if lens else 0, statistics.median(lens) if lens else 0) + t[7:]
    out = [fmt(r) for r in rows] + [fmt(t)]
    w = [max(len(HEAD[i]), *(len(r[i]) for r in out)) for i in range(len(HEAD))]
    print('  '.join(h.ljust(w[0]) if i == 0 else h.rjust(w[i]) for i, h in enumerate(HEAD)))
    for r in out:
        print('  '.join(c.ljust(w[0]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)))


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--top', type=int, default=15)
    ap.add_argument('--files', action='store_true', help='list every file')
    ap.add_argument('--against', metavar='OTHER_REPO', help='also summarise these crates of OTHER_REPO (before)')
    ap.add_argument('repo')
    ap.add_argument('crates', nargs='+')
    o = ap.parse_args()
    rows, fns, perfile = summary(o.repo, o.crates)
    if o.against:
        brows, bfns, _ = summary(o.against, o.crates)
        print('== %s (before)' % o.against)
        table(brows, bfns)
        print()
        print('== %s' % o.repo)
    table(rows, fns)
    print('(lines: non-test lines of the files; code: those not blank or comment only; mean/median/max: function lengths)')
    fns.sort(key=lambda f: (-f[0], f[1], f[2]))
    for limit in (120, 100):
        over = [f for f in fns if f[0] > limit]
        print('\nfunctions over %d lines: %d' % (limit, len(over)))
        for n, p, a, name in over:
            print('  %4d  %s:%d  %s' % (n, p, a, name))
    print('\nlongest %d:' % o.top)
    for n, p, a, name in fns[:o.top]:
        print('  %4d  %s:%d  %s' % (n, p, a, name))
    if o.files:
        print('\nfiles (lines, code, functions, longest function):')
        for p, lines, code, nf, longest in perfile:
            print('  %5d %5d %4d %4d  %s' % (lines, code, nf, longest, p))


if __name__ == '__main__':
    main()
