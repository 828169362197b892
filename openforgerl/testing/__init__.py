"""Test doubles for what cannot exist on the machine running the tests; shipped for users' tests too."""
