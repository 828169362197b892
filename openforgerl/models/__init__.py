"""Known policy models and how to get them into a Hugging Face directory in the user cache."""
