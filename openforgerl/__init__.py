"""openforgerl: train LLM agents inside the real harnesses they ship in.

Importing the package does no work: subpackages load their heavy dependencies lazily.
"""

__version__ = "0.1.0"
