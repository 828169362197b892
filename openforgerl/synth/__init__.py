"""Task synthesis (``forge synth``): propose tasks from reference assets, dedupe, filter."""
