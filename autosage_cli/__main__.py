"""`python -m autosage_cli`: the `autosage` command, for an environment whose scripts folder is not
on the PATH (or to pick the interpreter explicitly)."""
from .cli import main

if __name__ == "__main__":
    main()
