"""Container images: the Containerfiles and how radiance builds them."""
