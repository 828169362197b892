"""The address book's starting data: always the same contacts (a fixed seed), so tasks can be checked.

    python3 seed.py --root /        # at image build; --root DIR for a copy on another machine
"""

import random

import store
import webkit

SEED = 20270304
FIRST = ["Amara", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ingrid", "Jonas", "Keiko", "Luis",
         "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sanjay", "Tove"]
LAST = ["Almeida", "Berg", "Castillo", "Dubois", "Eriksen", "Fischer", "Gallo", "Haddad", "Ivanova", "Jensen",
        "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov"]
COMPANIES = {"Northwind Traders": "northwind.example", "Blue Harbor Labs": "blueharbor.example",
             "Cedar & Pine": "cedarpine.example", "Lumen Analytics": "lumen.example",
             "Riverside Clinic": "riverside.example"}
CITIES = ["Lisbon", "Oslo", "Lyon", "Krakow", "Ghent", "Turin", "Tartu"]
CONTACTS = 20


def populate(db):
    rng = random.Random(SEED)
    names = rng.sample([f"{first} {last}" for first in FIRST for last in LAST], CONTACTS)
    phones = rng.sample(range(100), CONTACTS)  # distinct
    for name, phone in zip(names, phones, strict=True):
        company = rng.choice(sorted(COMPANIES))
        first, last = name.lower().split()
        store.add_contact(db, name=name, email=f"{first}.{last}@{COMPANIES[company]}",
                          phone=f"+1 555 01{phone:02d}", company=company, city=rng.choice(CITIES))


if __name__ == "__main__":
    webkit.seed_main(store.SCHEMA, populate)
