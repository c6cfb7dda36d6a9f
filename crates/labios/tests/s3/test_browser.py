"""A real browser (Debian's Chromium, headless, driven by Selenium through
chromedriver) uploads to `labios s3` from a page of another origin, as a
data scientist's web notebook or a site's upload form does: the browser
sends the CORS preflight itself and enforces the answer, so what passes
here is what a user's browser lets through.

Run by crates/labios/tests/s3_gateway.rs beside test_boto3.py (same
environment). Needs `bash scripts/services.sh install` (chromium,
chromium-driver) and selenium in the test virtualenv.
"""

import hashlib
import http.server
import itertools
import os
import threading

import pytest
from botocore.exceptions import ClientError
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tenants import RUN, alice, client, code

PAGE = b"<!doctype html><title>upload</title><p>an upload page</p>"

# Runs in the page: PUT a body the page builds to a presigned URL, then
# GET it back through another, and hand the outcome to the test. A
# request the browser refuses for CORS rejects with a TypeError, which the
# page sees without any detail, as a real page would.
UPLOAD = """
const [put, get, size, done] = arguments;
const body = new Uint8Array(size);
for (let i = 0; i < size; i++) body[i] = (i * 31 + 7) % 251;
(async () => {
  try {
    const sent = await fetch(put, {method: "PUT", body,
      headers: {"Content-Type": "text/csv"}});
    const etag = sent.headers.get("ETag");
    if (!sent.ok) return done({stage: "put", status: sent.status, text: await sent.text()});
    const back = new Uint8Array(await (await fetch(get)).arrayBuffer());
    let same = back.length === size;
    for (let i = 0; same && i < size; i++) same = back[i] === body[i];
    done({stage: "done", status: sent.status, etag, same});
  } catch (e) {
    done({stage: "refused", error: String(e)});
  }
})();
"""


def body_of(size):
    """The bytes UPLOAD builds in the page."""
    return bytes((i * 31 + 7) % 251 for i in range(size))


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def origin():
    """A page served from an origin of its own (another port of loopback)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser(origin):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.set_script_timeout(30)
    driver.get(origin + "/upload.html")
    yield driver
    driver.quit()


# Signature V4, as browsers' upload code uses: only the host is signed, so
# the page may send its own Content-Type.
signer = client(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"], signature="s3v4")


# Each upload's URLs are valid for a different time, so that no two are
# the same: a browser keeps a successful preflight for a while (5 s in
# Chromium when the rule gives no MaxAgeSeconds), keyed by the URL, and
# sends the request itself without asking again. S3, like the gateway,
# runs a request that arrives, so an upload to the same URL made within
# the same second as an allowed one would be stored after the rules were
# removed.
validity = itertools.count(3600)


def upload(browser, bucket, key, size):
    expires = next(validity)
    put = signer.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": key},
                                        ExpiresIn=expires)
    get = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                        ExpiresIn=expires)
    return browser.execute_async_script(UPLOAD, put, get, size)


def absent(bucket, key):
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key=key)
    return code(e) in ("404", "NoSuchKey")


def test_a_browser_uploads_only_where_the_bucket_s_cors_allows(browser, origin):
    bucket = f"browser-{RUN}"
    alice.create_bucket(Bucket=bucket)
    size = 1 << 20

    # No CORS rules: the browser's preflight is refused, and nothing is stored.
    got = upload(browser, bucket, "refused.bin", size)
    assert got["stage"] == "refused", got
    assert absent(bucket, "refused.bin")

    # Rules for another origin, or without the header the page sends: still refused.
    for rule in ({"AllowedOrigins": ["https://elsewhere.example.org"], "AllowedMethods": ["PUT", "GET"],
                  "AllowedHeaders": ["*"]},
                 {"AllowedOrigins": [origin], "AllowedMethods": ["PUT", "GET"],
                  "AllowedHeaders": ["x-amz-*"]}):
        alice.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [rule]})
        got = upload(browser, bucket, "refused.bin", size)
        assert got["stage"] == "refused", (rule, got)
        assert absent(bucket, "refused.bin")

    # A rule for the page's origin: the upload goes through, the page reads
    # the exposed ETag and the bytes back, and boto3 sees the same object.
    alice.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": [origin], "AllowedMethods": ["PUT", "GET"],
         "AllowedHeaders": ["content-*"], "ExposeHeaders": ["ETag"]}]})
    got = upload(browser, bucket, "uploaded.bin", size)
    assert got["stage"] == "done" and got["status"] == 200 and got["same"], got
    stored = alice.get_object(Bucket=bucket, Key="uploaded.bin")
    assert stored["Body"].read() == body_of(size)
    assert stored["ContentType"] == "text/csv"
    assert got["etag"] == stored["ETag"] == f'"{hashlib.md5(body_of(size)).hexdigest()}"'

    # The rules removed: the browser refuses again, and the object stays as it was.
    alice.delete_bucket_cors(Bucket=bucket)
    got = upload(browser, bucket, "uploaded.bin", 1000)
    assert got["stage"] == "refused", got
    assert alice.head_object(Bucket=bucket, Key="uploaded.bin")["ContentLength"] == size
