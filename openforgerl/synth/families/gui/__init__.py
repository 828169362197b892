"""The gui families: name -> where each is defined (imported only when used)."""

TABLE: dict[str, str] = {}
