"""Screenshots of every page type, and the issue-20 "done when" check, on the generated 20,000-object
repository served by `auditor serve`.

    .venv/bin/python docs/screenshots.py [--repo /tmp/repo20k] [--out /tmp/placement-auditor-docs]

It generates the repository when it is missing (benchmarks/gen_repo.py, ~35 s), writes a config with
one directory target and a digest team per namespace prefix, audits it once (`auditor run`), starts
`auditor serve`, and loads in headless Chromium (DevTools protocol, tests/reports/browser.py) the
fleet overview, the target overview, the findings list, a finding, a 3-zone group map, the cluster
map and a fix preview, at 1280 px and at 390 px (phone): each must log nothing and not overflow the
phone's width. It sends the digests through a local SMTP server (aiosmtpd) with `auditor digest` and
measures each team's HTML part (< 100 KB, no inline SVG), writes the PDF report with `auditor report`
and checks with `pdftotext -bbox` that no word lies beyond the page margins, and renders its first
pages with pdftoppm. PNGs and figures.json go to --out (not committed: look at them). Exits 1 when a
check fails.
"""

from __future__ import annotations

import argparse
import email
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter
from email.message import Message
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "reports"))

from browser import Browser  # noqa: E402

MM = 72 / 25.4
PORTRAIT_MARGIN_MM, LANDSCAPE_MARGIN_MM = 16, 14  # templates/report/report.html.j2 @page rules


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def auditor(
    *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "auditor"), *args], capture_output=True, text=True, env=env, check=check
    )


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=600) as r:
        return json.loads(r.read())


def pdf_overflow(pdf: Path) -> tuple[int, list[str]]:
    """(pages, words beyond the margins) from pdftotext -bbox."""
    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, check=True).stdout
    ns = "{http://www.w3.org/1999/xhtml}"
    pages = 0
    bad = []
    for pages, page in enumerate(ET.fromstring(out).iter(f"{ns}page"), 1):
        w, h = float(page.get("width", 0)), float(page.get("height", 0))
        side = (LANDSCAPE_MARGIN_MM if w > h else PORTRAIT_MARGIN_MM) * MM
        for word in page.iter(f"{ns}word"):
            x0, y0, x1, y1 = (float(word.get(k, 0)) for k in ("xMin", "yMin", "xMax", "yMax"))
            if x0 < side - 1 or x1 > w - side + 1 or y0 < 0 or y1 > h - 4 * MM:
                bad.append(f"page {pages}: {word.text!r} at x {x0:.0f}-{x1:.0f} of {w:.0f}")
    return pages, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Path("/tmp/repo20k"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/placement-auditor-docs"))
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    problems: list[str] = []
    if not (args.repo / "clusters").is_dir():
        t = time.monotonic()
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gen_repo.py"), str(args.repo)], check=True)
        figures["generate_seconds"] = round(time.monotonic() - t, 1)

    port, smtp_port = free_port(), free_port()
    work = out / "work"
    work.mkdir(exist_ok=True)
    db = work / "auditor.db"
    db.unlink(missing_ok=True)
    # One team per clusters/<team>/ directory, routed by the namespaces under it.
    teams = ""
    for team in sorted(p for p in (args.repo / "clusters").iterdir() if p.is_dir()):
        spaces = sorted(d.name for d in team.iterdir() if d.is_dir())
        if spaces:
            teams += f"    - {{name: {team.name}, to: [{team.name}@example.com], "
            teams += f"namespaces: {json.dumps(spaces)}}}\n"
    config = work / "auditor.yaml"
    config.write_text(
        f"database: {{url: 'sqlite:///{db}'}}\n"
        f"service: {{host: 127.0.0.1, port: {port}}}\n"
        f"targets:\n  - name: bench\n    directory: '{args.repo}'\n"
        f"digest:\n  base_url: http://127.0.0.1:{port}\n"
        f"  smtp: {{host: 127.0.0.1, port: {smtp_port}, security: none, from: auditor@example.com}}\n"
        f"  teams:\n{teams}"
    )
    env = {**os.environ, "AUDITOR_DATABASE_URL": f"sqlite:///{db}"}
    t = time.monotonic()
    done = auditor("run", "--target", "bench", "--config", str(config), env=env, check=False)
    figures["audit_seconds"] = round(time.monotonic() - t, 1)
    if done.returncode not in (0, 1):
        print(done.stdout, done.stderr, file=sys.stderr)
        return 3

    server = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "auditor"), "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(work / "serve.log").open("w"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                get(f"{base}/healthz")
                break
            except OSError:
                time.sleep(0.5)
        findings = []
        cursor = ""
        while True:
            page = get(
                f"{base}/api/v1/findings?target=bench&limit=500" + (f"&cursor={cursor}" if cursor else "")
            )
            findings.extend(page["items"])
            cursor = page.get("next_cursor") or ""
            if not cursor:
                break
        figures["findings"] = len(findings)
        figures["findings_by_rule"] = dict(Counter(f["rule"] for f in findings))
        # A finding whose edge spans three zones, for the 3-zone group map.
        three = None
        for f in findings:
            if f["rule"] not in ("cross-zone-traffic", "cross-zone-blocked"):
                continue
            detail = get(f"{base}/api/v1/findings/{f['id']}")["detail"]
            edge = detail.get("edge") or {}
            zones = {*edge.get("from", {}).get("zones", []), *edge.get("to", {}).get("zones", [])}
            if len(zones) >= 3:
                three = f
                break
        blocked = next(
            (f for f in findings if f["rule"] in ("cross-zone-blocked", "traffic-blocked")), findings[0]
        )
        pages = {
            "overview": "/",
            "target": "/targets/bench",
            "findings": "/findings",
            "finding": f"/findings/{blocked['id']}",
            "cluster-map": "/targets/bench/map",
        }
        if three is not None:
            w = three["workload"]
            pages["group-map-3-zones"] = f"/targets/bench/groups/{w['namespace']}/{w['name']}"
        else:
            problems.append("no finding with an edge over three zones")
        fixable = next((f for f in findings if f["rule"] == "cross-zone-blocked"), blocked)
        pages["fix"] = f"/findings/{fixable['id']}/fix"
        with Browser() as browser:
            for name, path in pages.items():
                t = time.monotonic()
                desktop = browser.load(base + path, 1280, 900, out / f"{name}-desktop.png")
                took = round(time.monotonic() - t, 2)
                phone = browser.load(base + path, 390, 844, out / f"{name}-phone.png")
                figures[f"page {name}"] = {
                    "path": path,
                    "seconds": took,
                    "html_kb": round(len(desktop.html.encode()) / 1024, 1),
                    "console": desktop.messages + phone.messages,
                    "phone_scroll_width": phone.scroll_width,
                }
                if desktop.messages or phone.messages:
                    problems.append(f"{name}: {desktop.messages + phone.messages}")
                if phone.scroll_width > phone.viewport_width:
                    problems.append(f"{name}: {phone.scroll_width} px wide at phone width")
                if name == "group-map-3-zones" and desktop.html.count('class="zone"') < 3:
                    problems.append("the group map has fewer than three zones")

        # The digest, through a real SMTP server.
        from aiosmtpd.controller import Controller

        received: list[Message] = []

        class Inbox:
            async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
                received.append(email.message_from_bytes(envelope.content))
                return "250 OK"

        controller = Controller(Inbox(), hostname="127.0.0.1", port=smtp_port)
        controller.start()
        try:
            t = time.monotonic()
            auditor("digest", "--config", str(config), env=env)
            figures["digest_seconds"] = round(time.monotonic() - t, 1)
        finally:
            controller.stop()
        sizes = {}
        for msg in received:
            html = next(p.get_payload(decode=True) for p in msg.walk() if p.get_content_type() == "text/html")
            sizes[msg["To"]] = len(html)
            if b"<svg" in html:
                problems.append(f"digest to {msg['To']} inlines SVG")
        largest = max(sizes, key=lambda k: sizes[k]) if sizes else None
        figures["digests"] = len(sizes)
        if largest:
            figures["largest_digest"] = {"to": largest, "html_bytes": sizes[largest]}
            if sizes[largest] >= 100_000:
                problems.append(f"the largest digest is {sizes[largest]} bytes of HTML")
            msg = next(m for m in received if m["To"] == largest)
            text = next(
                p.get_payload(decode=True) for p in msg.walk() if p.get_content_type() == "text/plain"
            )
            (out / "digest-largest.txt").write_bytes(text)
            html = next(p.get_payload(decode=True) for p in msg.walk() if p.get_content_type() == "text/html")
            (out / "digest-largest.html").write_bytes(html)
            with Browser() as browser:
                browser.load((out / "digest-largest.html").as_uri(), 760, 900, out / "digest-desktop.png")

        # The PDF report.
        pdf = out / "report.pdf"
        t = time.monotonic()
        auditor("report", "--format", "pdf", "--config", str(config), "--output", str(pdf), env=env)
        figures["pdf_seconds"] = round(time.monotonic() - t, 1)
        count, beyond = pdf_overflow(pdf)
        figures["pdf"] = {"pages": count, "bytes": pdf.stat().st_size, "words_beyond_margins": len(beyond)}
        if beyond:
            problems.append(f"PDF: {len(beyond)} words beyond the margins, e.g. {beyond[:3]}")
        subprocess.run(
            ["pdftoppm", "-png", "-r", "60", "-f", "1", "-l", "8", str(pdf), str(out / "report")], check=True
        )
    finally:
        server.terminate()
        server.wait(30)
    figures["problems"] = problems
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    print(f"screenshots in {out}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
