"""Estimators Kestrel's graph trains: Gaussian, flow (NPE), likelihood (NLE), their losses and sampling."""
