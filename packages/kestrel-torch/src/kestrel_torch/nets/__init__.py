"""Networks: embeddings, conditional density heads, online normalisation, running moments."""
