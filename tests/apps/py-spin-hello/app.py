# Hello world of Spin's Python SDK 3.x (the `http-py` template of Spin 3.6). componentize-py
# keeps every import of the SDK's world, so this component imports all Spin 3 interfaces.
from spin_sdk import http
from spin_sdk.http import Request, Response


class IncomingHandler(http.IncomingHandler):
    def handle_request(self, request: Request) -> Response:
        return Response(
            200,
            {"content-type": "text/plain"},
            bytes("Hello from Python!", "utf-8"),
        )
