"""Engine implementations; ``engine.ENGINES`` maps their short names to these modules."""
