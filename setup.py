"""Package list for setuptools: the auditor packages plus policies/ and templates/, which live at the
top of the repository and ship inside the wheel as auditor._policies and auditor._templates
(pyproject.toml maps the directories); migrations/ likewise as auditor._migrations."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["auditor", "auditor.*"]),
        "auditor._policies",
        "auditor._templates",
        "auditor._migrations",
        "auditor._migrations.versions",
    ]
)
