"""Package list for setuptools: the auditor packages plus policies/ and templates/, which live at the
top of the repository and ship inside the wheel as auditor._policies and auditor._templates
(pyproject.toml maps the directories); migrations/ likewise as auditor._migrations. And the
optional C extension auditor/_fastyaml.c."""

from setuptools import Extension, find_packages, setup

setup(
    packages=[
        *find_packages(include=["auditor", "auditor.*"]),
        "auditor._policies",
        "auditor._templates",
        "auditor._migrations",
        "auditor._migrations.versions",
    ],
    # The loader's common case in C against the system libyaml (Debian: libyaml-dev). Optional:
    # without a compiler or the headers the package installs without it and auditor.yamlio does
    # the same work in Python (the results are the same; tests compare the two).
    ext_modules=[Extension("auditor._fastyaml", ["auditor/_fastyaml.c"], libraries=["yaml"], optional=True)],
)
