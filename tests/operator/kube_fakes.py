"""A recording stand-in for `kubernetes.client.ApiClient`, the one seam under `Kube`: every request
the operator makes passes through it as (HTTP verb, path, query, content type, body)."""

import json


class Response:
    def __init__(self, status, data):
        self.status, self.data, self.reason, self.headers = status, json.dumps(data).encode(), "r", {}

    def read(self):
        return self.data


class RecordingApi:
    """Records every call as (verb, path, query, content type, body) and answers it with
    `answer(verb, path, query, body)` -> (status, data); without one, every call gets `status` and
    a /scale-like body. Single-threaded: a call's answer is computed from the last call recorded."""

    def __init__(self, status=200, answer=None):
        self.calls = []
        self.answer = answer or (lambda verb, path, query, body: (status, {"spec": {"replicas": 3}}))

    def param_serialize(self, verb, path, query_params, header_params, body, auth_settings):
        self.calls.append((verb, path, query_params, header_params["Content-Type"], body))
        return verb, path, header_params, body, None

    def call_api(self, method, url, header_params, body, _request_timeout):
        verb, path, query, _, payload = self.calls[-1]
        return Response(*self.answer(verb, path, query, payload))
