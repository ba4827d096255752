"""Source data → (query, document) pairs: PubMed XML parsing, language identification, the pair
rules and the consistency filter's maths, the Islamic verse links and the built-in demo domain.
Imports nothing of the method above it (only ``mosaic_core.config``)."""
