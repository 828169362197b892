"""Tool-call parsers; ``tool_parser.TOOL_PARSERS`` maps their short names to these modules."""
