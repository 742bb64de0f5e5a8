"""The ``a3m`` command: one module per subcommand, each with ``add_arguments`` and ``run``
(or ``add_<name>_arguments`` and ``run_<name>`` when a module serves several)."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("a3m.cli.demo", "the main job: producers -> lossy network -> Spark, then the "
             "audit; writes a report (a3m-demo/report.html)"),
    "bench": ("a3m.cli.bench", "throughput / latency of A3M beside raw UDP, pyzmq and pynng in "
              "the same run (loopback, or an emulated lossy path: rpc)"),
    "chaos": ("a3m.cli.chaos", "a workload through the fault-injecting relay, checked "
              "exactly-once: sent, delivered, duplicates, lost, phantoms"),
    "audit": ("a3m.cli.audit", "Spark job over delivery journals: lost, duplicated, phantom "
              "messages per link, latency; JSON and a report"),
    "send": ("a3m.cli.cat", "send messages from arguments, a file or stdin through a socket "
             "(PUSH, PUB, REQ, ...); replies to stdout"),
    "recv": ("a3m.cli.cat", "print the messages a socket receives (PULL, SUB, REP, ...) to "
             "stdout, raw, quoted or as JSON lines"),
    "collect": ("a3m.spark.collector", "run a collector of the Spark source as a service: a "
                "node whose socket's messages are spooled durably for a partition of a "
                "source with collectors=external"),
    "key": ("a3m.cli.key", "a node's public key (from its key file, made if missing), to "
            "pin it on other nodes"),
}


def _version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("a3m")
    except PackageNotFoundError:
        from a3m import __version__

        return __version__


def _paths() -> str:
    """Which paths run: the native data plane or its Python twins, the compiled cores or
    their sources (``a3m --version``)."""
    import a3m

    if a3m.NATIVE:
        from a3m import _native

        data = f"native data plane {_native.__version__} ({_native.AEAD}; {_native.UDP})"
    else:
        data = "Python data plane (native module not running)"
    cores = "cores compiled (mypyc)" if a3m.COMPILED else "cores from their Python sources"
    return f"{data}; {cores}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="a3m", description="A3M: brokerless messaging, exactly once over UDP."
    )
    parser.add_argument("--version", action="version",
                        version=f"a3m {_version()}: {_paths()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (modname, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        try:
            mod = importlib.import_module(modname)
        except ImportError as exc:  # a command whose module is not built yet
            p.set_defaults(_missing=str(exc))
            continue
        if hasattr(mod, f"run_{name}"):
            getattr(mod, f"add_{name}_arguments")(p)
            p.set_defaults(_run=getattr(mod, f"run_{name}"))
        else:
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"a3m {args.command}: not available: {args._missing}", file=sys.stderr)
        return 2
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
