#!/usr/bin/env python3
"""The workspace's shape, per crate: code lines, files, public modules and
public items, and the import circles between a crate's files.

    scripts/house.py                 table per crate, then every circle
    scripts/house.py --circles       only the circles (exit 1 if any)
    scripts/house.py --json          the same as JSON

Code lines: blank, comment-only and `#[cfg(test)] mod` lines excluded (as
scripts/loc.py). Files: the crate's src/ files that are not test files.
Public modules: `pub mod` declarations reachable from lib.rs through public
modules only (what `cargo doc` shows as modules). Public items: `pub` fn,
struct, enum, trait, type, const, static and `pub use` names at crate
visibility `pub` inside those modules.

Imports: a file imports another when it names a path into it
(`crate::a::b`, `super::x`, `self::x` in a mod.rs, or a bare child module
`x::` of a mod.rs), in a `use` or inline. `mod x;` itself is not an import, nor is `pub use` (a module's face, which
hands names on); a name imported through a re-export is an import of the
file that defines it. A module and its own submodules' files are one
concept split by file (quinn's `connection/`): a circle inside them alone
is not counted. A circle is a strongly connected component of more than one file.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {"target", ".git", "fuzz", "tests", "benches", "examples"}


def crates():
    """(name, dir) of every workspace member with a src/lib.rs or main.rs."""
    toml = open(os.path.join(ROOT, "Cargo.toml")).read()
    m = re.search(r"members\s*=\s*\[(.*?)\]", toml, re.S)
    out = []
    for d in re.findall(r'"([^"]+)"', m.group(1)):
        src = os.path.join(ROOT, d, "src")
        if os.path.isdir(src):
            out.append((d, src))
    return out


def is_test_file(path):
    f = os.path.basename(path)
    return f.endswith("_tests.rs") or f == "tests.rs" or "/tests/" in path


def strip_tests(text):
    """Text without `#[cfg(test)] mod x { ... }` blocks and without comments."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        s = lines[i].strip()
        if s == "#[cfg(test)]" and i + 1 < len(lines) and re.match(r"\s*(pub(\(crate\))? )?mod \w+\s*\{", lines[i + 1]):
            depth, i = 0, i + 1
            while i < len(lines):
                depth += lines[i].count("{") - lines[i].count("}")
                i += 1
                if depth <= 0:
                    break
            continue
        if s.startswith("//"):
            i += 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def code_lines(text):
    return sum(1 for l in strip_tests(text).split("\n") if l.strip())


def module_files(src):
    """{module path tuple: file} for the crate's non-test source files."""
    mods = {}
    for d, dirs, fs in os.walk(src):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for f in fs:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(d, f)
            if is_test_file(p):
                continue
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if rel and rel[0] == "bin":
                continue
            mods[tuple(rel)] = p
    return mods


def resolve(mods, path):
    """The longest module prefix of `path` that has a file."""
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return None


PATH_RE = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
USE_RE = re.compile(r"\buse\s+([^;]+);", re.S)


def expand_use(tree):
    """Paths named by a use tree (`a::{b, c::d}` -> a::b, a::c::d)."""
    tree = re.sub(r"\s+", "", tree)
    tree = re.sub(r"\bas\w+", "", tree)
    out = []

    def walk(prefix, t):
        if "{" not in t:
            for part in split_top(t):
                out.append(prefix + [x for x in part.split("::") if x])
            return
        i = t.index("{")
        head = [x for x in t[:i].split("::") if x]
        inner = t[i + 1 : t.rindex("}")]
        for part in split_top(inner):
            walk(prefix + head, part)

    walk([], tree)
    return out


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


DEF_RE = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|const\s+|async\s+|extern\s+\"C\"\s+)*(?:fn|struct|enum|trait|type|const|static|union|mod)\s+(\w+)",
    re.M,
)
MACRO_RE = re.compile(r"macro_rules!\s+(\w+)")
REEXPORT_RE = re.compile(r"^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", re.M)


class Crate:
    """Definitions and re-exports of one crate's modules, to resolve a
    name to the file that defines it (an import of a re-export is an
    import of the defining file)."""

    def __init__(self, mods, texts):
        self.mods = mods
        self.defs = {m: set(DEF_RE.findall(t)) | set(MACRO_RE.findall(t)) for m, t in texts.items()}
        self.reexports = {}
        for m, t in texts.items():
            table = {}
            for u in REEXPORT_RE.findall(t):
                try:
                    for p in expand_use(u):
                        if p:
                            alias = re.search(r"\bas\s+(\w+)", u)
                            table[p[-1]] = absolute(m, p, self.mods)
                except ValueError:
                    pass
            self.reexports[m] = table

    def resolve(self, path, depth=0):
        """The module whose file defines what `path` (absolute) names."""
        m = resolve(self.mods, path)
        if m is None:
            return None
        rest = path[len(m):]
        if not rest or depth > 8:
            return m
        name = rest[0]
        if name in self.defs.get(m, ()):
            return m
        target = self.reexports.get(m, {}).get(name)
        if target:
            r = self.resolve(list(target) + rest[1:], depth + 1)
            if r is not None:
                return r
        return m


def absolute(mod, p, mods):
    """An absolute module path for use-path `p` written in module `mod`,
    or None when it leaves the crate."""
    base = list(mod)
    children = {m[len(base)] for m in mods if len(m) > len(base) and tuple(m[: len(base)]) == tuple(base)}
    if p[0] == "crate":
        return p[1:]
    if p[0] == "super":
        up = base
        while p and p[0] == "super":
            up = up[:-1]
            p = p[1:]
        return list(up) + p
    if p[0] == "self":
        return base + p[1:]
    if p[0] in children:
        return base + p
    return None


def imports(crate, mod, text):
    """Module paths (tuples) that the file of `mod` imports."""
    mods = crate.mods
    # `pub use` hands names on (a module's face): not an import of its own,
    # unless the file itself uses a name it re-exports.
    faced = []
    for u in REEXPORT_RE.findall(text):
        try:
            faced.extend(p for p in expand_use(u) if p)
        except ValueError:
            pass
    text = REEXPORT_RE.sub("", text)
    paths = []
    for p in faced:
        if re.search(r"\b%s\b" % re.escape(p[-1]), text):
            a = absolute(mod, p, mods)
            if a is not None:
                paths.append(a)
    aliases = {}
    for m in USE_RE.finditer(text):
        try:
            for p in expand_use(m.group(1)):
                if not p:
                    continue
                a = absolute(mod, p, mods)
                if a is None:
                    continue
                paths.append(a)
                if tuple(a) in mods:  # `use crate::wire;` then `wire::X`
                    aliases[a[-1]] = a
        except ValueError:  # `use` in a string or a macro: not a use tree
            pass
    for m in PATH_RE.finditer(text):
        a = absolute(mod, [m.group(1)] + [x for x in m.group(2).split("::") if x], mods)
        if a is not None:
            paths.append(a)
    for m in re.finditer(r"\b(\w+)((?:::\w+)+)", text):
        if m.group(1) in aliases:
            paths.append(aliases[m.group(1)] + [x for x in m.group(2).split("::") if x])
    out = set()
    for p in paths:
        t = crate.resolve(p)
        if t is not None and t != mod:
            out.add(t)
    return out


def one_concept(comp):
    """Whether a circle lies inside one module's own files: its mod.rs and
    files of its submodules only (quinn's `connection/`: `use
    super::Connection` in a child, the parent's use of its children)."""
    for top in comp:
        if all(c[: len(top)] == top for c in comp):
            return True
    return False


def tarjan(graph):
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return sccs


PUB_ITEM_RE = re.compile(
    r"^\s*pub\s+(?:unsafe\s+|const\s+|async\s+|extern\s+\"C\"\s+)*(fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+(\w+)",
    re.M,
)
PUB_USE_RE = re.compile(r"^\s*pub\s+use\s+([^;]+);", re.M)
PUB_MOD_RE = re.compile(r"^\s*pub\s+mod\s+(\w+)", re.M)


def public_modules(mods, texts):
    """Module paths reachable from the crate root through `pub mod` only."""
    pub = set()
    todo = [()]
    while todo:
        m = todo.pop()
        t = texts.get(m)
        if t is None:
            continue
        for name in PUB_MOD_RE.findall(t):
            c = m + (name,)
            if c not in pub:
                pub.add(c)
                todo.append(c)
    return pub


def analyse():
    rows, circles = [], []
    for name, src in crates():
        mods = module_files(src)
        texts = {m: strip_tests(open(p).read()) for m, p in mods.items()}
        lines = sum(code_lines(open(p).read()) for p in mods.values())
        pubmods = public_modules(mods, texts)
        items = 0
        for m in [()] + sorted(pubmods):
            t = texts.get(m, "")
            items += len(PUB_ITEM_RE.findall(t))
            for u in PUB_USE_RE.findall(t):
                try:
                    items += len([p for p in expand_use(u) if p and p[-1] not in ("self", "*")])
                except ValueError:
                    pass
        crate = Crate(mods, texts)
        graph = {m: imports(crate, m, texts[m]) for m in mods}
        for comp in tarjan(graph):
            if one_concept(comp):
                continue
            circles.append([os.path.relpath(mods[c], ROOT) for c in comp])
        rows.append(
            {
                "crate": name,
                "code_lines": lines,
                "files": len(mods),
                "public_modules": len(pubmods),
                "public_items": items,
            }
        )
    return rows, circles


def main():
    rows, circles = analyse()
    if "--json" in sys.argv:
        print(json.dumps({"crates": rows, "circles": circles}, indent=1))
        return
    if "--circles" not in sys.argv:
        print(f"{'crate':14} {'code lines':>10} {'files':>6} {'pub mods':>8} {'pub items':>9}")
        for r in rows:
            print(f"{r['crate']:14} {r['code_lines']:>10} {r['files']:>6} {r['public_modules']:>8} {r['public_items']:>9}")
        t = [sum(r[k] for r in rows) for k in ("code_lines", "files", "public_modules", "public_items")]
        print(f"{'all':14} {t[0]:>10} {t[1]:>6} {t[2]:>8} {t[3]:>9}")
    print(f"import circles: {len(circles)}")
    for i, c in enumerate(circles, 1):
        print(f"  {i}: " + ", ".join(c))
    if "--circles" in sys.argv and circles:
        sys.exit(1)


if __name__ == "__main__":
    main()
