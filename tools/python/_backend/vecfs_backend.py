"""A PEP 517 build backend for the vecfs module, standard library only.

pip builds the wheel with it offline, in a fresh virtual environment or
anywhere else: nothing to download first (`requires = []`).  The metadata
comes from pyproject.toml's [project] table; the wheel holds vecfs/*.py and
its .dist-info.  Also an sdist, and an editable wheel (PEP 660: a .pth
naming this directory).
"""

import base64
import hashlib
import io
import os
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "vecfs"
TAG = "py3-none-any"


def _toml_project():
    """pyproject.toml's [project] and [project.optional-dependencies]."""
    path = os.path.join(HERE, "pyproject.toml")
    try:
        import tomllib
    except ImportError:          # before 3.11: the simple subset used here
        tomllib = None
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f).get("project", {})
    import ast
    project, table = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                table = line.strip("[]").strip()
                continue
            if table not in ("project", "project.optional-dependencies") or "=" not in line:
                continue
            key, value = (s.strip() for s in line.split("=", 1))
            value = ast.literal_eval(value)
            if table == "project":
                project[key] = value
            else:
                project.setdefault("optional-dependencies", {})[key] = value
    return project


def _version():
    return _toml_project()["version"]


def _metadata():
    p = _toml_project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"]]
    if p.get("description"):
        lines.append("Summary: %s" % p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: %s" % p["requires-python"])
    for req in p.get("dependencies", []):
        lines.append("Requires-Dist: %s" % req)
    for extra, reqs in p.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: %s" % extra)
        for req in reqs:
            lines.append('Requires-Dist: %s; extra == "%s"' % (req, extra))
    body = ""
    if p.get("readme"):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(HERE, p["readme"]), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _dist_info():
    return "%s-%s.dist-info" % (PACKAGE, _version())


def _sources():
    """(path in the archive, path on disk) of the package's modules."""
    out = []
    for name in sorted(os.listdir(os.path.join(HERE, PACKAGE))):
        if name.endswith(".py"):
            out.append(("%s/%s" % (PACKAGE, name), os.path.join(HERE, PACKAGE, name)))
    return out


def _write_wheel(directory, files):
    """A wheel of files ((name, bytes) pairs) and the .dist-info; its name."""
    info = _dist_info()
    files = list(files) + [
        (info + "/METADATA", _metadata().encode("utf-8")),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: vecfs_backend\n"
                           "Root-Is-Purelib: true\nTag: %s\n" % TAG).encode()),
        (info + "/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append("%s,sha256=%s,%d" % (name, digest.decode(), len(data)))
    record.append(info + "/RECORD,,")
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = "%s-%s-%s.whl" % (PACKAGE, _version(), TAG)
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", 315532800)))[:6]
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            zi = zipfile.ZipInfo(name, stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return wheel


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# ------------------------------------------------------------ PEP 517 / 660
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(a, _read(p)) for a, p in _sources()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(PACKAGE + ".pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (PACKAGE, _version())
    names = ["pyproject.toml", "README.md", "_backend/vecfs_backend.py"] + [a for a, _ in _sources()]
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for name in names:
            t.add(os.path.join(HERE, name), arcname=base + "/" + name)
        data = _metadata().encode("utf-8")
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(data)
        ti.mtime = time.time()
        t.addfile(ti, io.BytesIO(data))
    return base + ".tar.gz"
