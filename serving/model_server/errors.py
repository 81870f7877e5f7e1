"""Request errors with TF Serving's status codes, and their HTTP equivalents.

Every failure a request can meet is raised as a `ServingError`; the gRPC layer
aborts the call with `code`/`message` and the REST layer answers
`{"error": message}` with the HTTP status TF Serving's `http_server.cc` maps the
code to.
"""

import json

import grpc

# The content type of the REST API's answers, errors included.
REST_JSON_CONTENT_TYPE = "application/json"
# TF Serving's ToHTTPStatusCode (tensorflow_serving/model_servers/http_server.cc).
HTTP_STATUS_FOR_CODE = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}


# What an error quotes of one string the client chose (a model name, a label, an alias): an
# unknown name of 16 KiB, echoed whole, made the error larger than gRPC's metadata limit, so the
# client got RESOURCE_EXHAUSTED instead of NOT_FOUND.
MAX_QUOTED_CHARS = 256
# The most an error message takes, in UTF-8 bytes, whatever it quotes: gRPC percent-encodes it
# in a header (up to three times as long), within its 8 KiB metadata limit.
MAX_MESSAGE_BYTES = 2048


def quote(text: str) -> str:
    """`text` (a string the client chose) as an error or a log line quotes it: whole up to
    MAX_QUOTED_CHARS characters, else its start and its length."""
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    return f"{text[:MAX_QUOTED_CHARS]}... ({len(text)} characters)"


def bounded_message(message: str) -> str:
    """`message` cut to MAX_MESSAGE_BYTES of UTF-8 (at a character's boundary), marked."""
    encoded = message.encode("utf-8", errors="surrogatepass")
    if len(encoded) <= MAX_MESSAGE_BYTES:
        return message
    cut = encoded[: MAX_MESSAGE_BYTES - 32].decode("utf-8", errors="ignore")
    return f"{cut}... ({len(encoded)} bytes)"


def rest_error_body(message: str) -> bytes:
    """TF Serving's REST error document, `{"error": message}`, as UTF-8 JSON."""
    return json.dumps({"error": message}, ensure_ascii=False).encode("utf-8")


# tensorflow::error::Code and grpc status codes share their numbering.
_CODE_FOR_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


class ServingError(Exception):
    """A request failure carrying the status TF Serving would return.

    Args:
        code: a `grpc.StatusCode`.
        message: the status message, worded as TF Serving words it where it
            has an equivalent; cut to MAX_MESSAGE_BYTES (`bounded_message`), and the strings
            it quotes of the client's each cut with `quote`.
    """

    def __init__(self, code: grpc.StatusCode, message: str):
        message = bounded_message(message)
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS_FOR_CODE.get(self.code, 500)

    def __str__(self) -> str:
        # absl::Status::ToString() style, used where TF Serving nests a status
        # inside another message.
        return f"{self.code.name}: {self.message}"


def code_from_number(number: int) -> grpc.StatusCode:
    """Maps a canonical error number (tf.errors.OpError.error_code) to a gRPC code."""
    return _CODE_FOR_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def invalid_argument(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.NOT_FOUND, message)


def failed_precondition(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.FAILED_PRECONDITION, message)


def unavailable(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.UNAVAILABLE, message)


def cancelled(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.CANCELLED, message)


def deadline_exceeded(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.DEADLINE_EXCEEDED, message)


def unimplemented(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.UNIMPLEMENTED, message)


def internal(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INTERNAL, message)


def resource_exhausted(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
