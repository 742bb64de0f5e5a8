"""The compiled fast path (a3m/_compiled.py): the set-up builds it, the cores run it, and the
Python sources take over when asked or when they changed since the build."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import a3m
from a3m import _compiled

SRC = Path(__file__).resolve().parents[1] / "src"
PROBE = ("import json, a3m, a3m.exon.protocol as p, a3m.core.socket_core as s; "
         "print(json.dumps([a3m.COMPILED, p.__file__, s.__file__]))")


def _probe(pure: bool) -> tuple[bool, str, str]:
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_ENV}
    if pure:
        env[_compiled.PURE_ENV] = "1"
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", PROBE],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    compiled, proto, core = json.loads(out.stdout)
    return compiled, proto, core


def test_every_core_module_is_compiled_by_the_set_up() -> None:
    if os.environ.get("A3M_PURE_BUILD", "") not in ("", "0"):
        pytest.skip("A3M_PURE_BUILD: the set-up was asked not to compile")
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for source in _compiled.sources(str(SRC)):
        stem = source[:-3]
        assert any(os.path.exists(stem + s) for s in suffixes), f"not compiled: {source}"


def test_the_cores_run_compiled_unless_the_sources_are_asked_for() -> None:
    if os.environ.get("A3M_PURE_BUILD", "") not in ("", "0"):
        pytest.skip("A3M_PURE_BUILD: the set-up was asked not to compile")
    compiled, proto, core = _probe(pure=False)
    assert compiled and not proto.endswith(".py") and not core.endswith(".py")
    compiled, proto, core = _probe(pure=True)
    assert not compiled and proto.endswith("protocol.py") and core.endswith("socket_core.py")


def test_this_process_runs_what_a3m_compiled_says() -> None:
    import a3m.exon.wire as wire

    assert (not wire.__file__.endswith(".py")) == a3m.COMPILED


def _fake_tree(root: Path, source_newer: bool) -> None:
    folder = root / "a3m" / "core"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "fastmod.py").write_text("WHO = 'source'\n")
    ext = folder / ("fastmod" + importlib.machinery.EXTENSION_SUFFIXES[0])
    ext.write_bytes(b"not really an extension")
    old = time.time() - 100
    os.utime(folder / "fastmod.py" if not source_newer else ext, (old, old))


@pytest.mark.parametrize("source_newer", [False, True])
def test_a_source_edited_since_the_build_runs_instead_of_its_stale_extension(
        tmp_path: Path, source_newer: bool) -> None:
    _fake_tree(tmp_path, source_newer)
    script = (
        "import sys, warnings, json\n"
        f"sys.path.insert(0, {str(SRC)!r})\n"
        "from a3m import _compiled\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    on = _compiled.activate({str(tmp_path)!r})\n"
        "print(json.dumps([on, [str(x.message) for x in w],\n"
        "                  [type(f).__name__ for f in sys.meta_path]]))\n")
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_ENV}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    on, warned, finders = json.loads(out.stdout)
    if source_newer:
        assert on is False and "changed since the compiled fast path was built" in warned[0]
        assert finders[0] == "SourceFinder"
    else:
        assert on is True and warned == [] and "SourceFinder" not in finders


def test_the_source_finder_loads_the_py_file_past_the_extension(tmp_path: Path) -> None:
    _fake_tree(tmp_path, source_newer=True)
    finder = _compiled.SourceFinder(
        {"a3m.core.fastmod": str(tmp_path / "a3m" / "core" / "fastmod.py")})
    spec = finder.find_spec("a3m.core.fastmod", None)
    assert spec is not None and spec.origin is not None and spec.origin.endswith("fastmod.py")
    assert finder.find_spec("a3m.core.other", None) is None


@pytest.mark.slow
def test_a_failed_compilation_leaves_the_pure_package(tmp_path: Path) -> None:
    """setup.py with a C compiler that fails on mypyc's shared library only: the build still
    succeeds, says why, and leaves no extension behind, not even the per-module ones that
    did compile (without the shared library they would not import)."""
    root = SRC.parent
    shutil.copy(root / "setup.py", tmp_path / "setup.py")
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(root / "README.md", tmp_path / "README.md")
    shutil.copytree(SRC / "a3m", tmp_path / "src" / "a3m",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    cc = tmp_path / "cc"
    cc.write_text('#!/bin/sh\ncase "$*" in *__native*) exit 1;; esac\nexec gcc "$@"\n')
    cc.chmod(0o755)
    env = {**os.environ, "CC": str(cc)}
    env.pop("A3M_PURE_BUILD", None)
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert "the compiled fast path was not built" in out.stderr
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(suffixes)]
    assert (tmp_path / "build").exists()  # mypyc did generate the C: the compiler failed


#: The compile and link flags ``_compiled.compile_flags`` gives the mypyc group, by compiler
#: (its GCC major version; 0: not GCC) and profile stage. No clock or speed enters it.
HIDDEN = ["-fvisibility=hidden"]
GCC_FLAGS = [*HIDDEN, "-fno-semantic-interposition"]
FLAG_CASES = [
    ("clang, no profile", 0, "", HIDDEN, []),
    ("clang, asked for a profile", 0, "use", HIDDEN, []),
    ("GCC, no profile", _compiled.PGO_MIN_GCC, "", GCC_FLAGS, []),
    ("GCC too old for a profile", _compiled.PGO_MIN_GCC - 1, "generate", GCC_FLAGS, []),
    ("GCC, profile off", _compiled.PGO_MIN_GCC, "0", GCC_FLAGS, []),
    ("GCC, instrumented build", _compiled.PGO_MIN_GCC, "generate",
     [*GCC_FLAGS, "-fprofile-generate", "-fprofile-update=atomic"], ["-fprofile-generate"]),
]


@pytest.mark.parametrize("compiler, gcc_major, stage, cflags, ldflags", FLAG_CASES,
                         ids=[c[0] for c in FLAG_CASES])
def test_the_build_flags_by_compiler_and_profile_stage(compiler: str, gcc_major: int,
                                                       stage: str, cflags: list[str],
                                                       ldflags: list[str]) -> None:
    """Every compiler hides the group's symbols; GCC also lets its functions inline into one
    another; a profile's stages only where GCC can (``PGO_MIN_GCC`` or later)."""
    got_cflags, got_ldflags = _compiled.compile_flags(gcc_major=gcc_major, pgo=stage)
    assert got_cflags == cflags, compiler
    assert got_ldflags == ldflags, compiler


def test_the_laid_out_build_uses_the_profile_partly_trained() -> None:
    cflags, ldflags = _compiled.compile_flags(gcc_major=_compiled.PGO_MIN_GCC, pgo="use")
    assert cflags[:2] == GCC_FLAGS and ldflags == []
    assert "-fprofile-use" in cflags and "-fprofile-partial-training" in cflags


@pytest.mark.parametrize("macros, major", [
    ("#define __GNUC__ 12\n#define __GNUC_MINOR__ 2\n", 12),
    ("#define __GNUC__ 4\n#define __clang__ 1\n", 0),  # clang passes for GCC 4
    ("#define __STDC__ 1\n", 0),
])
def test_the_compiler_is_told_by_its_predefined_macros(macros: str, major: int, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cc = tmp_path / "cc"
    cc.write_text(f"#!/bin/sh\nprintf '{macros}'\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    assert _compiled.gcc_major() == major
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert _compiled.gcc_major() == 0


def test_the_compiled_group_exports_only_its_init() -> None:
    """The group's functions are not interposable symbols (each call through the PLT, none
    inlined into another): only ``PyInit_`` is exported; the modules reach the group through
    its capsules."""
    if not a3m.COMPILED:
        pytest.skip("the compiled modules do not run here")
    nm = shutil.which("nm")
    if nm is None or not sys.platform.startswith("linux"):
        pytest.skip("needs binutils' nm, on Linux")
    group = _compiled.group_library(str(SRC))
    assert group is not None
    out = subprocess.run([nm, "-D", "--defined-only", group], capture_output=True, text=True,
                         timeout=60, check=True)
    names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    assert names and all(n.startswith("PyInit_") for n in names), names[:10]


def test_a_profile_marker_names_only_the_group_it_was_written_for(tmp_path: Path) -> None:
    """``profile_guided`` (a benchmark's ``machine``) holds while the group is the one the
    profile-guided build left, and not after another build replaced it."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    group = tmp_path / f"0123abcd__mypyc{suffix}"
    group.write_bytes(b"built once")
    marker = tmp_path / "profile.json"
    assert not _compiled.profile_guided(str(tmp_path), str(marker))  # no marker
    st = group.stat()
    marker.write_text(json.dumps({"library": group.name, "size": st.st_size,
                                  "mtime_ns": st.st_mtime_ns}))
    assert _compiled.group_library(str(tmp_path)) == str(group)
    assert _compiled.profile_guided(str(tmp_path), str(marker))
    group.write_bytes(b"built again, plainly")  # (another size: whatever the clock says)
    assert not _compiled.profile_guided(str(tmp_path), str(marker))
    marker.write_text("not json")
    assert not _compiled.profile_guided(str(tmp_path), str(marker))


def test_the_set_up_built_the_group_guided_by_a_profile() -> None:
    """``make``'s set-up (CI runs it on a fresh clone) leaves the profile-guided build where
    GCC 10 or later is there; a plain build after it (``pip install -e .``) is not taken
    for one."""
    if os.environ.get("CI", "") != "true":
        pytest.skip("checked on CI's fresh set-up (a developer's tree may be rebuilt plainly)")
    if not a3m.COMPILED or os.environ.get("A3M_PGO", "") == "0":
        pytest.skip("no compiled modules, or A3M_PGO=0")
    if _compiled.gcc_major() < 10:
        pytest.skip("a profile needs GCC 10 or later")
    assert _compiled.profile_guided(str(SRC))


def _pgo_build() -> Any:
    """``tools/pgo_build.py`` as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("pgo_build", SRC.parent / "tools" / "pgo_build.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case, stages, marked", [
    ("pgo_off", [""], False),             # A3M_PGO=0: one plain build
    ("old_gcc", [""], False),             # no GCC 10: one plain build
    ("generate_fails", ["generate", ""], False),
    ("nothing_trained", ["generate", ""], False),  # no profile of the imports alone
    ("use_fails", ["generate", "use", ""], False),
    ("all_good", ["generate", "use"], True),
])
def test_the_profile_guided_build_falls_back_to_a_plain_one_and_says_so(
        case: str, stages: list[str], marked: bool, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each stage that cannot be done gives the plain build (the package then runs as after
    ``pip install``); only a build laid out by a real training run leaves the marker."""
    pgo = _pgo_build()
    group = tmp_path / "src" / f"0123abcd__mypyc{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    group.parent.mkdir()
    group.write_bytes(b"the group")
    marker = tmp_path / "profile.json"
    marker.write_text("{}")  # an earlier build's: removed first
    done: list[str] = []

    def build(stage: str) -> bool:
        done.append(stage)
        return not ((case == "generate_fails" and stage == "generate")
                    or (case == "use_fails" and stage == "use"))

    def train() -> int:
        if case == "nothing_trained":
            return 0
        (tmp_path / "build").mkdir(exist_ok=True)
        (tmp_path / "build" / "group.gcda").write_bytes(b"counts")
        return len(pgo.TRAINING)

    monkeypatch.setattr(pgo, "ROOT", tmp_path)
    monkeypatch.setattr(pgo, "build", build)
    monkeypatch.setattr(pgo, "train", train)
    gcc = _compiled.PGO_MIN_GCC - (case == "old_gcc")
    monkeypatch.setattr(pgo, "COMPILED", {**pgo.COMPILED, "PROFILE_MARKER": str(marker),
                                          "gcc_major": lambda: gcc})
    monkeypatch.delenv("A3M_PGO", raising=False)
    if case == "pgo_off":
        monkeypatch.setenv("A3M_PGO", "0")
    assert pgo.main() == 0
    assert done == stages
    assert marker.exists() == marked
    if marked:
        made = json.loads(marker.read_text())
        assert made["library"] == group.name and made["workloads_done"] == len(pgo.TRAINING)
        assert _compiled.profile_guided(str(tmp_path / "src"), str(marker))
