"""The validating admission webhook (`auditor admit`, docs/admission.md): a warm model of the
cluster (warm.py), the decisions (check.py, answer.py), AdmissionReview (review.py) and the HTTPS
server that records every answer (server.py)."""
