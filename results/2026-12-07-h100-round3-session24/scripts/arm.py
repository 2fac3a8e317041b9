"""`python3 arm.py ARM bench ...`: the autosage CLI in this process with the kept aggregation on
("on", as shipped) or off ("off": keep_aggregations(False)), for an A/B in alternated processes."""
import sys

import autosage_cli.torch as at

arm = sys.argv.pop(1)
assert arm in ("on", "off"), arm
if arm == "off":
    at.keep_aggregations(False)
print(f"arm {arm}", file=sys.stderr)
from autosage_cli.cli import main  # noqa: E402
main()
