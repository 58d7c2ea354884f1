"""Write ``spice-coding.exe`` for the Windows CPython of the Wine environment.

A console script the way pip's installer writes one on Windows: distlib's console launcher
(``t64.exe``, shipped inside the pip wheel from PyPI that runs this script), then a shebang
line naming the interpreter, then a zip whose ``__main__.py`` calls the CLI. The tests start
``Path(sys.executable).parent / "spice-coding"``, as they do on every platform; the sources
stay where the ``sync`` step puts them (``C:\\src``, through a ``.pth``).

usage: python3 make_console_script.py OUT.exe 'C:\\python313\\python.exe'
"""

from __future__ import annotations

import importlib
import io
import sys
import zipfile
from pathlib import Path

MAIN = "import sys\nfrom spice.agent.coding._cli import main\nsys.exit(main())\n"


def main() -> None:
    distlib = importlib.import_module("pip._vendor.distlib")  # the launcher ships with pip
    out, interpreter = Path(sys.argv[1]), sys.argv[2]
    launcher = (Path(str(distlib.__file__)).parent / "t64.exe").read_bytes()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("__main__.py", MAIN)
    shebang = f'#!"{interpreter}"\r\n'.encode()
    out.write_bytes(launcher + shebang + archive.getvalue())


if __name__ == "__main__":
    main()
