"""The fresh interpreter of ``harness.sources.probe_elsewhere``: the entry made again from
its target spec, its samples' plain calls probed (in a forked child where this interpreter can
fork), the answer printed as one JSON line."""

from __future__ import annotations

import json
import sys


def main() -> int:
    """The fresh interpreter: the entry from the spec, its samples probed (forked if safe)."""
    from harness.core.options import Options
    from harness.engine.probe import probe_samples
    from harness.sources.target import TargetSource, TargetSpec
    from harness.sources.user_samples import base_samples

    request = json.loads(sys.stdin.read())
    options = Options.from_dict(request["options"])
    (entry,) = TargetSource(TargetSpec.from_dict(request["spec"])).entries()
    found = probe_samples(entry, base_samples(entry, options), options.timeout_s)
    print(json.dumps(found.__dict__ if found is not None else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
