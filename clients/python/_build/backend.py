"""A PEP 517 build backend in the standard library alone.

``pip install ./clients/python`` must work with no network and nothing but
the interpreter: the machine's setuptools (65) cannot build a wheel without
the ``wheel`` package, which is not installed and cannot be fetched. A pure
Python package needs little: this backend zips ``weir/`` with the
``.dist-info`` files a wheel is (PEP 427, PEP 660 for editable installs), and
tars an sdist. ``requires = []``, so even an isolated build needs no index.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "weir"
_TAG = "py3-none-any"


def _project() -> dict[str, str]:
    """The string fields of pyproject.toml's [project] table, read with tomllib
    (3.11+); on 3.10, which the client supports and which has no tomllib, the
    few ``key = "value"`` lines this project's table has are read by hand
    (tests/test_unit.py checks that both read the same)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:
        fields = _project_by_hand(text)
    else:
        project = tomllib.loads(text).get("project")
        if not isinstance(project, dict):
            raise RuntimeError("pyproject.toml has no [project] table")
        fields = {k: v for k, v in project.items() if isinstance(v, str)}
    for key in ("name", "version", "requires-python", "description"):
        if key not in fields:
            raise RuntimeError(f"pyproject.toml [project] lacks {key}")
    version = re.search(r'__version__ = "([^"]+)"', (ROOT / PACKAGE / "_version.py").read_text(encoding="utf-8"))
    if version is None or version.group(1) != fields["version"]:
        raise RuntimeError("pyproject.toml's version and weir/_version.py's differ")
    return fields


def _project_by_hand(text: str) -> dict[str, str]:
    """The ``key = "value"`` lines of pyproject.toml's [project] table."""
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if table is None:
        raise RuntimeError("pyproject.toml has no [project] table")
    return dict(re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"\s*$', table.group(1), re.M))


def _dist(fields: dict[str, str]) -> str:
    return re.sub(r"[-_.]+", "_", fields["name"]).lower() + "-" + fields["version"]


def _metadata(fields: dict[str, str]) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {fields['name']}",
        f"Version: {fields['version']}",
        f"Summary: {fields['description']}",
        f"Requires-Python: {fields['requires-python']}",
    ]
    if "license" in fields:
        lines.append(f"License-Expression: {fields['license']}")
        lines.append("License-File: LICENSE")
    lines += ["Description-Content-Type: text/markdown", "", readme]
    return "\n".join(lines)


def _files() -> list[Path]:
    return sorted(p for p in (ROOT / PACKAGE).rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel(wheel_directory: str, contents: dict[str, bytes]) -> str:
    fields = _project()
    dist = _dist(fields)
    info = f"{dist}.dist-info"
    contents = dict(contents)
    contents[f"{info}/METADATA"] = _metadata(fields).encode("utf-8")
    contents[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: weir-build\nRoot-Is-Purelib: true\nTag: {_TAG}\n"
    ).encode()
    contents[f"{info}/top_level.txt"] = f"{PACKAGE}\n".encode()
    contents[f"{info}/licenses/LICENSE"] = (ROOT / "LICENSE").read_bytes()
    record = [_record_line(n, d) for n, d in contents.items()] + [f"{info}/RECORD,,"]
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{dist}-{_TAG}.whl"
    # A fixed timestamp: the same sources make the same wheel.
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in contents.items():
            zi = zipfile.ZipInfo(n, date_time=stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
    return name


# The PEP 517 hooks.


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None) -> str:
    return _wheel(wheel_directory, {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in _files()})


def build_editable(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    # A .pth file puts the source folder on sys.path: edits show at once.
    return _wheel(wheel_directory, {f"_{PACKAGE}_editable.pth": (str(ROOT) + "\n").encode()})


def build_sdist(sdist_directory: str, config_settings: dict | None = None) -> str:
    fields = _project()
    dist = _dist(fields)
    name = f"{dist}.tar.gz"
    members = ["pyproject.toml", "README.md", "LICENSE", "_build/backend.py", *(p.relative_to(ROOT).as_posix() for p in _files())]
    with tarfile.open(Path(sdist_directory) / name, "w:gz") as tar:
        for m in members:
            tar.add(ROOT / m, arcname=f"{dist}/{m}")
        pkg_info = _metadata(fields).encode("utf-8")
        ti = tarfile.TarInfo(f"{dist}/PKG-INFO")
        ti.size = len(pkg_info)
        tar.addfile(ti, io.BytesIO(pkg_info))
    return name
