"""Wire dialects; ``dialect.DIALECTS`` maps their short names to these modules."""
