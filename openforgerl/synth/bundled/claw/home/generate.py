#!/usr/bin/env python3
"""Generates the ``home`` workspace (the files under /app): Sam Rivera's home directory.

    python3 generate.py --out files

CSV spreadsheets (expenses, a shared trip, an inventory, books), INI and JSON configs, logs with
INFO/WARN/ERROR lines, markdown notes, an .ics calendar, .vcf contacts, saved .eml messages and a
messy downloads folder. Stdlib only. Invariant: the output is a pure function of ``SEED`` (the same
bytes on every run and every machine), so the committed ``files/`` can be checked against it.
"""

from __future__ import annotations

import argparse
import csv
import io
import random
import shutil
from pathlib import Path

SEED = 20240601
MONTHS = ["2024-01", "2024-02", "2024-03", "2024-04", "2024-05", "2024-06"]
MERCHANTS = {
    "groceries": (["FreshMart", "Corner Grocer", "Green Basket"], 12, 140),
    "utilities": (["City Power", "AquaWorks", "FiberNet"], 30, 120),
    "transport": (["Metro Transit", "Shell Station", "RideNow"], 3, 70),
    "dining": (["Luigi's Trattoria", "Noodle Bar", "Bean There Cafe"], 4, 85),
    "health": (["Wellness Pharmacy", "Dr. Patel Clinic"], 8, 160),
    "entertainment": (["Cinema Paradiso", "StreamBox", "Book Nook"], 9, 60),
}


def money(rng: random.Random, low: int, high: int) -> str:
    return f"{rng.randint(low * 100, high * 100) / 100:.2f}"


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def expenses(rng: random.Random) -> str:
    rows = []
    for month in MONTHS:
        rows.append([f"{month}-01", "rent", "Oakview Properties", "1250.00", "transfer"])
        days = sorted(rng.sample(range(2, 29), 12))
        for day in days:
            category = rng.choice(sorted(MERCHANTS))
            names, low, high = MERCHANTS[category]
            payment = rng.choice(["card", "card", "cash"]) if category != "utilities" else "transfer"
            rows.append([f"{month}-{day:02d}", category, rng.choice(names), money(rng, low, high), payment])
    return csv_text(["date", "category", "merchant", "amount", "payment"], rows)


def trip(rng: random.Random) -> str:
    items = {"food": ["Pasteis de Belem", "Time Out Market", "Tasca do Chico", "Groceries"],
             "lodging": ["Alfama apartment"], "transport": ["Tram 28", "Taxi", "Train to Sintra", "Airport metro"],
             "tickets": ["Castelo de Sao Jorge", "Oceanario", "Jeronimos Monastery"]}
    rows = [["2024-05-17", "Alex", "Alfama apartment", "lodging", "412.00"]]
    for day in range(17, 22):
        for _ in range(rng.randint(3, 5)):
            category = rng.choice(["food", "food", "transport", "tickets"])
            low, high = {"food": (6, 48), "transport": (2, 35), "tickets": (8, 25)}[category]
            rows.append([f"2024-05-{day}", rng.choice(["Sam", "Alex", "Jordan"]), rng.choice(items[category]),
                         category, money(rng, low, high)])
    return csv_text(["date", "paid_by", "item", "category", "amount_eur"], rows)


def inventory(rng: random.Random) -> str:
    things = {"tools": ["Cordless drill", "Socket set", "Claw hammer", "Tape measure", "Stud finder", "Jigsaw"],
              "garden": ["Pruning shears", "Garden hose", "Leaf rake", "Watering can", "Seed trays", "Wheelbarrow"],
              "kitchen": ["Stand mixer", "Cast iron pan", "Chef knife", "Spice jars", "Stock pot", "Blender"],
              "electronics": ["USB-C hub", "Spare router", "HDMI cable", "Power bank", "Label printer", "Webcam"]}
    rows = []
    for number, (category, name) in enumerate(((c, n) for c in things for n in things[c]), start=1):
        location = rng.choice(["garage", "shed", "basement", "attic"])
        rows.append([f"SKU-{number:03d}", name, category, str(rng.randint(1, 12)), money(rng, 3, 180), location])
    return csv_text(["sku", "name", "category", "quantity", "unit_price", "location"], rows)


BOOKS = [("The Left Hand of Darkness", "Ursula K. Le Guin", 1969), ("Kindred", "Octavia E. Butler", 1979),
         ("Piranesi", "Susanna Clarke", 2020), ("The Remains of the Day", "Kazuo Ishiguro", 1989),
         ("Gideon the Ninth", "Tamsyn Muir", 2019), ("A Wizard of Earthsea", "Ursula K. Le Guin", 1968),
         ("Parable of the Sower", "Octavia E. Butler", 1993), ("Klara and the Sun", "Kazuo Ishiguro", 2021),
         ("Salt, Fat, Acid, Heat", "Samin Nosrat", 2017), ("The Overstory", "Richard Powers", 2018),
         ("Station Eleven", "Emily St. John Mandel", 2014), ("Never Let Me Go", "Kazuo Ishiguro", 2005),
         ("The Dispossessed", "Ursula K. Le Guin", 1974), ("Sea of Tranquility", "Emily St. John Mandel", 2022),
         ("Braiding Sweetgrass", "Robin Wall Kimmerer", 2013), ("The Fifth Season", "N. K. Jemisin", 2015)]


def books(rng: random.Random) -> str:
    rows = []
    for index, (title, author, year) in enumerate(BOOKS):
        rows.append([f"978-0-{1000 + index * 37:04d}-{rng.randint(1000, 9999)}-{index % 10}", title, author,
                     str(year), rng.choice(["living room", "study", "bedroom"]), rng.choice(["read", "unread"])])
    return csv_text(["isbn", "title", "author", "year", "shelf", "status"], rows)


APP_INI = """; Settings of the home media server
[server]
host = 127.0.0.1
port = 8096
workers = 4
timeout = 30

[database]
engine = sqlite
path = /app/data/media.db
pool_size = 5
timeout = 15

[logging]
level = INFO
file = /app/logs/app.log
rotate_mb = 10

[features]
dark_mode = true
beta_sync = false
telemetry = false
"""
BACKUP_INI = """# Nightly backup of the home directory
[schedule]
frequency = daily
start_time = 02:30
keep_days = 14

[target]
path = /mnt/backup/home
compress = yes
encrypt = no

[limits]
max_size_gb = 200
bandwidth_kbps = 4096
retries = 3
"""
SETTINGS_JSON = """{
  "theme": "light",
  "language": "en-US",
  "editor": {
    "tab_size": 4,
    "font": "Fira Code",
    "font_size": 13,
    "word_wrap": false
  },
  "sync": {
    "enabled": true,
    "interval_minutes": 15,
    "folders": 3
  },
  "notifications": {
    "email": false,
    "desktop": true,
    "quiet_start": "22:00"
  }
}
"""
PRINTER_JSON = """{
  "name": "Brother HL-L2350",
  "duplex": true,
  "copies": 1,
  "paper": {
    "size": "A4",
    "tray": 1
  },
  "toner_alert_percent": 20
}
"""

LOG_MESSAGES = {  # level -> (message, low, high) with {n} drawn in [low, high]
    "INFO": [("request served in {n} ms", 3, 900), ("cache warmed ({n} entries)", 10, 500),
             ("user session started", 0, 0), ("scan finished", 0, 0), ("ERROR counters reset", 0, 0),
             ("retrying after ERROR backoff of {n} s", 1, 30)],
    "DEBUG": [("heartbeat ok", 0, 0), ("queue depth {n}", 0, 40)],
    "WARN": [("slow query took {n} ms", 500, 4000), ("disk usage at {n} percent", 80, 97),
             ("certificate expires in {n} days", 3, 20), ("deprecated option in config", 0, 0)],
    "ERROR": [("connection reset by peer", 0, 0), ("timeout after {n} s", 10, 120),
              ("permission denied on /app/data", 0, 0), ("checksum mismatch in chunk {n}", 1, 400)],
}


def log(rng: random.Random, day: str, components: list[str], lines: int) -> str:
    out, seconds = [], 8 * 3600
    for _ in range(lines):
        seconds += rng.randint(5, 400)
        level = rng.choices(["INFO", "DEBUG", "WARN", "ERROR"], weights=[60, 10, 18, 12])[0]
        template, low, high = rng.choice(LOG_MESSAGES[level])
        message = template.format(n=rng.randint(low, high))
        stamp = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        out.append(f"{day} {stamp} {level} [{rng.choice(components)}] {message}")
        if level == "ERROR" and rng.random() < 0.3:
            out.append(f"    at worker-{rng.randint(1, 4)} (ERROR detail follows)")
    return "\n".join(out) + "\n"


NOTES = {
    "groceries.md": "# Groceries\n\n- oat milk\n- coffee beans\n- spinach\n- rice (5 kg)\n- lemons\n",
    "garden-plan.md": "# Garden plan 2024\n\nTomatoes go in the south bed after 2024-05-10.\n"
                      "Basil and parsley in pots by the kitchen door.\nOrder seed trays (see inventory).\n",
    "meeting-hoa.md": "# Homeowners association, 2024-04-18\n\nAttendees: Sam, Priya Nair, Tom Becker\n\n"
                      "- Fence repair quote: 2,400 EUR, vote on 2024-05-16\n- Parking rules unchanged\n",
    "reading-list.md": "# Reading list\n\nSee /app/data/books.csv for the shelves.\n\n"
                       "Next: Piranesi, then The Fifth Season.\n",
    "wifi.md": "# Home network\n\nThe spare router lives in the basement.\nGuest network: garden-guest\n",
}

EVENTS = [("Dentist check-up", "20240409T093000", "20240409T101500", "Smile Dental, Rua Verde 12"),
          ("Book club", "20240411T190000", "20240411T210000", "Book Nook"),
          ("HOA meeting", "20240418T180000", "20240418T193000", "Community hall"),
          ("Car service", "20240423T080000", "20240423T120000", "Metro Motors"),
          ("Yoga class", "20240502T071500", "20240502T081500", "Studio Flow"),
          ("Mum's birthday dinner", "20240507T193000", "20240507T223000", "Luigi's Trattoria"),
          ("Book club", "20240509T190000", "20240509T210000", "Book Nook"),
          ("HOA vote", "20240516T180000", "20240516T190000", "Community hall"),
          ("Flight to Lisbon", "20240517T064500", "20240517T091000", "Terminal 2"),
          ("Flight home", "20240521T171500", "20240521T194000", "Lisbon airport"),
          ("Plumber visit", "20240604T130000", "20240604T150000", "Home"),
          ("Book club", "20240606T190000", "20240606T210000", "Book Nook"),
          ("Eye exam", "20240613T111500", "20240613T120000", "Vision Center"),
          ("Garden centre trip", "20240615T100000", "20240615T113000", "Green Thumb Nursery")]


def ics() -> str:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Sam Rivera//home calendar//EN"]
    for number, (summary, start, end, location) in enumerate(EVENTS, start=1):
        lines += ["BEGIN:VEVENT", f"UID:home-{number:03d}@sam.example", "DTSTAMP:20240401T000000",
                  f"DTSTART:{start}", f"DTEND:{end}", f"SUMMARY:{summary}",
                  "LOCATION:" + location.replace(",", "\\,"), "END:VEVENT"]
    lines.append("END:VCALENDAR")
    return "\r\n".join(lines) + "\r\n"


CONTACTS = [("Priya Nair", "Northwind Health"), ("Tom Becker", "Becker Plumbing"), ("Lena Vogel", "Northwind Health"),
            ("Marcus Hale", "Cobalt Labs"), ("Aiko Tanaka", "Cobalt Labs"), ("Diego Ramos", "Oakview Properties"),
            ("Fatima Zahra", "Northwind Health"), ("Jordan Lee", "Cobalt Labs"), ("Alex Kim", "Freelance"),
            ("Grace Obi", "Oakview Properties"), ("Noah Fischer", "Cobalt Labs"), ("Sofia Rossi", "Freelance")]


def vcards(rng: random.Random) -> str:
    cards = []
    for name, org in CONTACTS:
        first, last = name.split()
        domain = org.lower().replace(" ", "") + ".example" if org != "Freelance" else "mail.example"
        cards.append("\r\n".join(["BEGIN:VCARD", "VERSION:3.0", f"N:{last};{first};;;", f"FN:{name}", f"ORG:{org}",
                                  f"EMAIL;TYPE=work:{first.lower()}.{last.lower()}@{domain}",
                                  f"TEL;TYPE=cell:+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
                                  "END:VCARD"]))
    return "\r\n".join(cards) + "\r\n"


MAILS = [("rent-receipt", "Diego Ramos <diego.ramos@oakviewproperties.example>", "Rent receipt for May 2024",
          "Thu, 02 May 2024 09:12:00 +0000", "Hi Sam,\n\nWe received your May rent of 1250.00 EUR.\n\nDiego\n"),
         ("plumber", "Tom Becker <tom.becker@beckerplumbing.example>", "Plumber visit on 2024-06-04",
          "Mon, 27 May 2024 16:40:00 +0000", "Hello,\n\nI will come by on 2024-06-04 at 13:00 to fix the "
          "kitchen sink.\nQuote: 180 EUR.\n\nTom\n"),
         ("fence-vote", "Priya Nair <priya.nair@northwindhealth.example>", "HOA fence vote",
          "Fri, 19 Apr 2024 08:05:00 +0000", "Sam,\n\nThe fence vote is on 2024-05-16. Please bring the quote.\n"),
         ("streambox-invoice", "StreamBox <billing@streambox.example>", "Your StreamBox invoice INV-20240601",
          "Sat, 01 Jun 2024 00:10:00 +0000", "Invoice INV-20240601\nAmount: 12.99 EUR\nPaid by card.\n"),
         ("trip-costs", "Alex Kim <alex.kim@mail.example>", "Lisbon trip costs",
          "Wed, 22 May 2024 20:30:00 +0000", "Hey! I put the shared costs in a sheet; let's settle up soon.\n")]


def eml(sender: str, subject: str, date: str, body: str, number: int) -> str:
    return (f"From: {sender}\nTo: Sam Rivera <sam@home.example>\nSubject: {subject}\nDate: {date}\n"
            f"Message-ID: <home-{number:03d}@mail.example>\nContent-Type: text/plain; charset=us-ascii\n\n{body}")


DOWNLOADS = ["invoice-2024-03.pdf", "Scan_0003.PDF", "tax-summary-2023.pdf", "beach.jpg", "IMG_2041.JPG",
             "passport-copy.png", "screenshot-router.png", "setup-notes.txt", "todo-old.txt", "bank-export.csv",
             "lease-draft.docx", "podcast-ep12.mp3", "photos-lisbon.zip", "warranty-drill.pdf"]


def download(name: str, rng: random.Random) -> str:
    suffix = name.rsplit(".", 1)[1].lower()
    header = {"pdf": "%PDF-1.4 (placeholder)", "jpg": "JPEG placeholder", "png": "PNG placeholder",
              "zip": "ZIP placeholder", "mp3": "ID3 placeholder", "docx": "DOCX placeholder"}.get(suffix, "")
    return f"{header}\n{name}: {rng.randint(10**8, 10**9)}\n" if header else f"{name}\nkept for reference\n"


def workspace() -> dict[str, str]:
    """Relative path -> text of every file of the workspace."""
    rng = random.Random(SEED)
    files = {
        "README.md": "# Sam Rivera's home directory\n\nfinance/ spending sheets, data/ inventories, config/ app "
                     "settings,\nlogs/ service logs, notes/, calendar/, contacts/, mail/ saved messages, downloads/.\n",
        "finance/expenses_2024.csv": expenses(rng),
        "finance/trip_lisbon_2024.csv": trip(rng),
        "data/inventory.csv": inventory(rng),
        "data/books.csv": books(rng),
        "config/app.ini": APP_INI,
        "config/backup.ini": BACKUP_INI,
        "config/settings.json": SETTINGS_JSON,
        "config/printer.json": PRINTER_JSON,
        "logs/app.log": log(rng, "2024-06-03", ["api", "db", "auth", "cache"], 70),
        "logs/backup.log": log(rng, "2024-06-04", ["scheduler", "upload", "verify"], 45),
        "logs/sync.log": log(rng, "2024-06-05", ["watcher", "transfer", "conflict", "db"], 60),
        "calendar/personal.ics": ics(),
        "contacts/contacts.vcf": vcards(rng),
    }
    files.update({f"notes/{name}": text for name, text in NOTES.items()})
    for number, (slug, sender, subject, date, body) in enumerate(MAILS, start=1):
        files[f"mail/{number:02d}-{slug}.eml"] = eml(sender, subject, date, body, number)
    files.update({f"downloads/{name}": download(name, rng) for name in DOWNLOADS})
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to (re)create with the workspace")
    out = Path(parser.parse_args().out)
    if out.exists():
        shutil.rmtree(out)
    for relative, text in sorted(workspace().items()):
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))


if __name__ == "__main__":
    main()
