"""``a3m key``: a node's public key, to pin it elsewhere (``--pin``, ``associate(...,
public_key=...)``, a discovery file's fourth column)."""

from __future__ import annotations

import argparse

from a3m.exon.secure import format_public_key


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("node", nargs="?", help="the node id (its key in the user's key directory, "
                   "made if missing)")
    p.add_argument("--key-file", help="the key file instead (made if missing)")
    p.add_argument("--path", action="store_true", help="print the key file's path too")


def run(args: argparse.Namespace) -> int:
    from a3m.runtime.identity import default_key_path, load_or_create_key

    if (args.node is None) == (args.key_file is None):
        print("a3m key: give a node id or --key-file", flush=True)
        return 2
    path = args.key_file or default_key_path(args.node)
    key = load_or_create_key(path)
    print(format_public_key(key.public) + (f" {path}" if args.path else ""))
    return 0
