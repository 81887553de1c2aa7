/* s3_fake_server.c - the scripted hostile S3 server of the unit tests
 * (s3_fake_server.h). */
#include "s3_fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "test.h"

/* ---- the wire ------------------------------------------------------------ */

static void send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0)
      return;
    c += w;
    n -= (size_t)w;
  }
}

static void sendf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sendf(int fd, const char *fmt, ...) {
  char b[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof(b), fmt, ap);
  va_end(ap);
  send_all(fd, b, n > 0 && (size_t)n < sizeof(b) ? (size_t)n : 0);
}

static void xml_reply(int fd, const char *xml) {
  sendf(fd,
        "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: %zu\r\n"
        "Connection: close\r\n\r\n",
        strlen(xml));
  send_all(fd, xml, strlen(xml));
}

static void error_reply(int fd, int code, const char *reason, const char *s3code) {
  char e[256];
  snprintf(e, sizeof(e), "<Error><Code>%s</Code><Message>%s</Message></Error>", s3code, reason);
  sendf(fd, "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", code, reason,
        strlen(e), e);
}

/* ---- the bucket ---------------------------------------------------------- */

fake_obj *fake_find(fake *f, const char *name) {
  for (int i = 0; i < f->nobj; i++)
    if (!strcmp(f->objs[i].name, name))
      return &f->objs[i];
  return NULL;
}

/* An ETag from the bytes and a generation, so a replaced object's differs
 * even when its bytes come back. */
static void set_etag(fake_obj *o, unsigned gen) {
  unsigned char sum[32];
  EVP_Digest(o->data, o->len, sum, NULL, EVP_sha256(), NULL);
  snprintf(o->etag, sizeof(o->etag), "\"%02x%02x%02x%02x%02x%02x%02x%02x-%u\"", sum[0], sum[1],
           sum[2], sum[3], sum[4], sum[5], sum[6], sum[7], gen);
}

fake_obj *fake_put_object(fake *f, const char *name, const void *data, size_t len) {
  fake_obj *o = fake_find(f, name);
  if (!o) {
    ASSERT(f->nobj < FAKE_MAXOBJ);
    o = &f->objs[f->nobj++];
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof(o->name), "%s", name);
  }
  free(o->data);
  o->data = malloc(len ? len : 1);
  ASSERT_NOT_NULL(o->data);
  if (len)
    memcpy(o->data, data, len);
  o->len = len;
  set_etag(o, (unsigned)f->n_replaced);
  return o;
}

void fake_endpoint(const fake *f, char *endpoint, size_t len) {
  snprintf(endpoint, len, "http://127.0.0.1:%d", f->port);
}

void fake_env_keys(void) {
  setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "secret-test-key", 1);
  unsetenv("AWS_SESSION_TOKEN");
  unsetenv("AWS_ENDPOINT_URL");
  unsetenv("AWS_ENDPOINT_URL_S3");
}

/* ---- listing ------------------------------------------------------------- */

static void list_ok(fake *f, int fd) {
  size_t cap = 1024 + (size_t)FAKE_MAXOBJ * 512, n = 0;
  char *xml = malloc(cap);
  ASSERT_NOT_NULL(xml);
  n += (size_t)snprintf(xml + n, cap - n, "<ListBucketResult><IsTruncated>false</IsTruncated>");
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nobj; i++)
    n += (size_t)snprintf(xml + n, cap - n,
                          "<Contents><Key>" FAKE_PREFIX "/%s</Key><Size>%zu</Size><ETag>%s</ETag>"
                          "<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>",
                          f->objs[i].name, f->objs[i].len, f->objs[i].etag);
  pthread_mutex_unlock(&f->mu);
  snprintf(xml + n, cap - n, "</ListBucketResult>");
  xml_reply(fd, xml);
  free(xml);
}

static void list_reply(fake *f, int fd) {
  char xml[16384];
  f->n_list++;
  if (f->list_mode == LIST_OK) {
    list_ok(f, fd);
  } else if (f->list_mode == LIST_LOOP || f->list_mode == LIST_NEW_TOKEN) {
    snprintf(xml, sizeof(xml),
             "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>t%d"
             "</NextContinuationToken></ListBucketResult>",
             f->list_mode == LIST_LOOP ? 0 : f->n_list);
    xml_reply(fd, xml);
  } else if (f->list_mode == LIST_HUGE) {
    size_t total = (size_t)40 << 20;
    sendf(fd, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", total);
    static char chunk[65536];
    memset(chunk, ' ', sizeof(chunk));
    for (size_t done = 0; done < total; done += sizeof(chunk))
      send_all(fd, chunk, sizeof(chunk));
  } else { /* LIST_MANY: 1000 keys of 900 bytes a page, a new token each time */
    static char page[1 << 20];
    size_t m = (size_t)snprintf(page, sizeof(page),
                                "<ListBucketResult><IsTruncated>true"
                                "</IsTruncated>");
    char pad[901];
    memset(pad, 'k', 900);
    pad[900] = '\0';
    for (int i = 0; i < 1000; i++)
      m += (size_t)snprintf(page + m, sizeof(page) - m,
                            "<Contents><Key>" FAKE_PREFIX
                            "/backup-%d-%d-%s</Key><Size>1</Size></Contents>",
                            f->n_list, i, pad);
    snprintf(page + m, sizeof(page) - m,
             "<NextContinuationToken>t%d</NextContinuationToken></ListBucketResult>", f->n_list);
    xml_reply(fd, page);
  }
}

/* ---- GET ----------------------------------------------------------------- */

/* What one GET asked for: its byte range (the whole object without a Range
 * header) and its If-Match. */
typedef struct get_req {
  int ranged;
  size_t off, n;     /* the bytes served */
  char if_match[96]; /* "" when absent */
} get_req;

/* The value of header `name` (lower case, with its colon) into out; 0 when absent. */
static int header(const char *hdrs, const char *name, char *out, size_t len) {
  char key[64];
  snprintf(key, sizeof(key), "\r\n%s", name);
  const char *h = strcasestr(hdrs, key);
  if (!h)
    return 0;
  h += strlen(key);
  while (*h == ' ')
    h++;
  size_t n = strcspn(h, "\r\n");
  snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), h);
  return 1;
}

/* Parses "bytes=a-b" / "bytes=a-" against the object's length; 0 when it
 * cannot be satisfied (416). */
static int parse_range(const char *hdrs, const fake_obj *o, get_req *r) {
  char v[128];
  r->ranged = 0;
  r->off = 0;
  r->n = o->len;
  if (!header(hdrs, "range:", v, sizeof(v)))
    return 1;
  unsigned long long a = 0, b = 0;
  int k = sscanf(v, "bytes=%llu-%llu", &a, &b);
  if (k < 1 || a >= o->len)
    return 0;
  if (k < 2 || b >= o->len)
    b = o->len - 1;
  if (b < a)
    return 0;
  r->ranged = 1;
  r->off = (size_t)a;
  r->n = (size_t)(b - a + 1);
  return 1;
}

/* The status line and the headers that say which bytes follow ("Content-
 * Length" only when `with_len`), without the blank line. */
static void send_head(int fd, const fake_obj *o, const get_req *r, int with_len) {
  if (r->ranged)
    sendf(fd, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %zu-%zu/%zu\r\n", r->off,
          r->off + r->n - 1, o->len);
  else
    sendf(fd, "HTTP/1.1 200 OK\r\n");
  if (with_len)
    sendf(fd, "Content-Length: %zu\r\n", r->n);
  sendf(fd, "ETag: %s\r\n", o->etag);
}

/* The mode this GET of o gets: get_mode for the victim's faulty GETs. */
static int mode_for(fake *f, fake_obj *o) {
  int k = ++o->n_get;
  if (strcmp(o->name, f->victim) != 0 || f->get_mode == GET_OK || k <= f->fault_after)
    return GET_OK;
  if (f->fault_times > 0 && k > f->fault_after + f->fault_times)
    return GET_OK;
  f->n_faults++;
  return f->get_mode;
}

static void sha256_b64(const unsigned char *d, size_t n, char b64[48]) {
  unsigned char sum[32];
  EVP_Digest(d, n, sum, NULL, EVP_sha256(), NULL);
  EVP_EncodeBlock((unsigned char *)b64, sum, 32);
}

/* A body of n bytes from d, pieces of `piece` bytes `pause_us` apart,
 * until sent, the client leaves or fake_stop. */
static void send_paced(fake *f, int fd, const unsigned char *d, size_t n, size_t piece,
                       useconds_t pause_us) {
  for (size_t i = 0; i < n && !f->stop; i += piece) {
    size_t k = n - i < piece ? n - i : piece;
    if (send(fd, d + i, k, MSG_NOSIGNAL) <= 0)
      break;
    f->sent += (long long)k;
    usleep(pause_us);
  }
}

static void get_ok(fake *f, int fd, const fake_obj *o, const get_req *r) {
  send_head(fd, o, r, 1);
  if (!r->ranged) {
    char b64[48];
    sha256_b64(o->data, o->len, b64);
    sendf(fd, "x-amz-checksum-sha256: %s\r\n", b64);
  }
  sendf(fd, "Connection: close\r\n\r\n");
  send_all(fd, o->data + r->off, r->n);
  f->sent += (long long)r->n;
}

static void redirect(fake *f, int fd, int code, const char *name) {
  const char *why = code == 301 ? "PermanentRedirect" : "TemporaryRedirect";
  char e[256];
  snprintf(e, sizeof(e), "<Error><Code>%s</Code><Message>%s</Message></Error>", why, why);
  sendf(fd,
        "HTTP/1.1 %d %s\r\nLocation: http://127.0.0.1:%d/" FAKE_BUCKET "/" FAKE_PREFIX "/%s\r\n"
        "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
        code, why, f->port, name, strlen(e), e);
}

/* The modes that answer with the object's bytes, whole or not. */
static int get_body(fake *f, int fd, const fake_obj *o, const get_req *r, int mode) {
  const unsigned char *d = o->data + r->off;
  switch (mode) {
  case GET_TRUNCATE:
    if (r->ranged)
      send_head(fd, o, r, 0);
    else
      sendf(fd, "HTTP/1.1 200 OK\r\n");
    sendf(fd, "Connection: close\r\n\r\n");
    send_all(fd, d, r->n / 2);
    f->sent += (long long)r->n / 2;
    return 0;
  case GET_SHORT:
  case GET_RESET:
    send_head(fd, o, r, 1);
    sendf(fd, "Connection: close\r\n\r\n");
    send_all(fd, d, r->n / 2);
    f->sent += (long long)r->n / 2;
    if (mode == GET_RESET) {
      struct linger l = {.l_onoff = 1, .l_linger = 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      return 1; /* closed at once: a reset */
    }
    return 0;
  case GET_DRIP:
    send_head(fd, o, r, 1);
    sendf(fd, "Connection: close\r\n\r\n");
    send_paced(f, fd, d, r->n, 150, 100000);
    return 0;
  case GET_DRIP_HUGE: /* far more than the object: only the rate can end it */
    sendf(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\nConnection: close\r\n\r\n");
    for (size_t i = 0; !f->stop; i = (i + 150) % (o->len - 150)) {
      if (send(fd, o->data + i, 150, MSG_NOSIGNAL) <= 0)
        break;
      f->sent += 150;
      usleep(100000);
    }
    return 0;
  case GET_PACED: {
    char b64[48];
    sha256_b64(o->data, o->len, b64);
    sendf(fd,
          "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nx-amz-checksum-sha256: %s\r\n"
          "Connection: close\r\n\r\n",
          o->len, b64);
    send_paced(f, fd, o->data, o->len, 20000, 100000);
    return 0;
  }
  case GET_ENDLESS: {
    static unsigned char junk[65536];
    if (r->ranged)
      send_head(fd, o, r, 0);
    else
      sendf(fd, "HTTP/1.1 200 OK\r\n");
    sendf(fd, "Connection: close\r\n\r\n");
    for (;;) {
      ssize_t w = send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
      if (w <= 0)
        break;
      f->sent += w;
    }
    return 0;
  }
  case GET_BAD_SUM:
    sendf(fd,
          "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nx-amz-checksum-sha256: "
          "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\nConnection: close\r\n\r\n",
          o->len);
    send_all(fd, o->data, o->len);
    f->sent += (long long)o->len;
    return 0;
  case GET_FLIPPED: {
    unsigned char *c = malloc(o->len);
    ASSERT_NOT_NULL(c);
    memcpy(c, o->data, o->len);
    c[o->len / 2] ^= 0x40;
    sendf(fd, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", o->len);
    send_all(fd, c, o->len);
    f->sent += (long long)o->len;
    free(c);
    return 0;
  }
  case GET_BIG_HEADER: {
    sendf(fd, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nX-Junk: ", o->len);
    static char junk[300 << 10];
    memset(junk, 'j', sizeof(junk));
    send_all(fd, junk, sizeof(junk));
    sendf(fd, "\r\nConnection: close\r\n\r\n");
    send_all(fd, o->data, o->len);
    return 0;
  }
  default:
    get_ok(f, fd, o, r);
    return 0;
  }
}

/* The modes that answer with an error instead of the bytes. */
static void get_refused(fake *f, int fd, const char *name, int mode) {
  if (mode == GET_RETRY_503) {
    const char *e = "<Error><Code>SlowDown</Code><Message>slow down</Message></Error>";
    sendf(fd,
          "HTTP/1.1 503 Slow Down\r\nRetry-After: %s\r\nContent-Length: %zu\r\n"
          "Connection: close\r\n\r\n%s",
          f->retry_after, strlen(e), e);
  } else if (mode == GET_503) {
    error_reply(fd, 503, "Service Unavailable", "ServiceUnavailable");
  } else if (mode == GET_FORGED_MSG) {
    const char *e = "<Error><Code>InternalError</Code><Message>oops&#10;2025-01-01 00:00:00 "
                    "INFO backup: resuming from s3://bkt/p/evil \x1b[2Jdone</Message></Error>";
    sendf(fd,
          "HTTP/1.1 500 Internal Server Error\r\nContent-Length: %zu\r\n"
          "Connection: close\r\n\r\n%s",
          strlen(e), e);
  } else {
    redirect(f, fd, mode == GET_REDIRECT_301 ? 301 : 307, name);
  }
}

/* One GET of `name` (hdrs: its headers). Returns 1 when the connection is
 * to be reset rather than closed. */
static int get_reply(fake *f, int fd, const char *name, const char *hdrs) {
  fake_obj *o = fake_find(f, name);
  f->n_get++;
  if (!o) {
    error_reply(fd, 404, "Not Found", "NoSuchKey");
    return 0;
  }
  int mode = mode_for(f, o);
  if (mode == GET_REPLACE) { /* a new version: one byte changed, a new ETag */
    pthread_mutex_lock(&f->mu);
    o->data[o->len / 2] ^= 0x01;
    set_etag(o, (unsigned)++f->n_replaced);
    pthread_mutex_unlock(&f->mu);
    mode = GET_OK;
  }
  get_req r;
  memset(&r, 0, sizeof(r));
  char range[128];
  if (header(hdrs, "range:", range, sizeof(range)))
    f->n_range++;
  if (!parse_range(hdrs, o, &r)) {
    error_reply(fd, 416, "Range Not Satisfiable", "InvalidRange");
    return 0;
  }
  if (header(hdrs, "if-match:", r.if_match, sizeof(r.if_match)) && strcmp(r.if_match, o->etag)) {
    f->n_412++;
    error_reply(fd, 412, "Precondition Failed", "PreconditionFailed");
    return 0;
  }
  if (mode == GET_RETRY_503 || mode == GET_503 || mode == GET_FORGED_MSG ||
      mode == GET_REDIRECT_301 || mode == GET_REDIRECT_307) {
    get_refused(f, fd, name, mode);
    return 0;
  }
  return get_body(f, fd, o, &r, mode);
}

/* ---- PUT, copy, delete, uploads ------------------------------------------ */

/* A PUT's body (the headers up to hdr_end, `early` bytes of it read with
 * them): read whole and answered 200 (PUT_OK), or read at 1500 B/s until
 * the client leaves (PUT_DRIP), which POLLRDHUP tells while its bytes are
 * still queued. */
static void put_reply(fake *f, int fd, const char *hdrs, size_t early) {
  static char sink[1 << 16];
  const char *cl = strcasestr(hdrs, "\r\ncontent-length:");
  long long len = cl ? atoll(cl + 17) : -1, got = (long long)early;
  f->n_put++;
  f->received += got;
  if (strcasestr(hdrs, "\r\nexpect: 100-continue"))
    sendf(fd, "HTTP/1.1 100 Continue\r\n\r\n");
  while (len < 0 || got < len) {
    if (f->put_mode == PUT_DRIP) {
      struct pollfd p = {.fd = fd, .events = POLLRDHUP};
      if (f->stop || (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))))
        return;
      usleep(100000);
    }
    ssize_t n = read(fd, sink, f->put_mode == PUT_DRIP ? 150 : sizeof(sink));
    if (n <= 0)
      return;
    got += n;
    f->received += n;
  }
  sendf(fd, "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

static void uploads_reply(fake *f, int fd, const char *q) {
  f->n_uploads++;
  snprintf(f->uploads_query, sizeof(f->uploads_query), "%s", q);
  if (f->uploads_paged && !strstr(q, "key-marker="))
    xml_reply(fd, "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>"
                  "<Upload><Key>p/a&#10;b</Key><UploadId>u1</UploadId></Upload>"
                  "<NextKeyMarker>p/a&#10;b</NextKeyMarker>"
                  "<NextUploadIdMarker>u1</NextUploadIdMarker></ListMultipartUploadsResult>");
  else if (f->uploads_paged)
    xml_reply(fd, "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                  "<Upload><Key>p/c</Key><UploadId>u2</UploadId></Upload>"
                  "</ListMultipartUploadsResult>");
  else
    xml_reply(fd, "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                  "</ListMultipartUploadsResult>");
}

static void head_reply(fake *f, int fd, const char *name) {
  f->n_head++;
  pthread_mutex_lock(&f->mu);
  fake_obj *o = fake_find(f, name);
  size_t len = o ? o->len : 0;
  char etag[40] = "";
  if (o)
    snprintf(etag, sizeof(etag), "%s", o->etag);
  pthread_mutex_unlock(&f->mu);
  if (o)
    sendf(fd, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nETag: %s\r\nConnection: close\r\n\r\n",
          len, etag);
  else
    sendf(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

static void copy_reply(fake *f, int fd, const char *name, const char *hdrs) {
  f->n_copy++;
  const char *src = strcasestr(hdrs, "x-amz-copy-source:") + 18;
  while (*src == ' ')
    src++;
  char sname[96] = "";
  sscanf(src, "/" FAKE_BUCKET "/" FAKE_PREFIX "/%95[^\r\n]", sname);
  pthread_mutex_lock(&f->mu);
  fake_obj *o = fake_find(f, sname);
  if (o && f->nobj < FAKE_MAXOBJ) {
    fake_obj *c = &f->objs[f->nobj++];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%.95s", name);
    c->data = malloc(o->len);
    memcpy(c->data, o->data, o->len);
    c->len = o->len;
    snprintf(c->etag, sizeof(c->etag), "%s", o->etag);
  }
  pthread_mutex_unlock(&f->mu);
  xml_reply(fd, o ? "<CopyObjectResult><ETag>\"x\"</ETag></CopyObjectResult>"
                  : "<Error><Code>NoSuchKey</Code></Error>");
}

static void delete_reply(fake *f, int fd, const char *name) {
  f->n_delete++;
  pthread_mutex_lock(&f->mu);
  int copied = 0;
  for (int i = 0; i < f->nobj; i++)
    copied |=
        !strncmp(f->objs[i].name, name, strlen(name)) && strlen(f->objs[i].name) > strlen(name);
  fake_obj *o = fake_find(f, name);
  if (o) {
    if (!copied)
      f->deleted_uncopied++;
    free(o->data);
    *o = f->objs[--f->nobj];
  }
  pthread_mutex_unlock(&f->mu);
  sendf(fd, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
}

/* ---- the server ---------------------------------------------------------- */

/* One request on fd: "METHOD /bkt/p/name?query HTTP/1.1" + headers (no
 * body is sent by the operations under test but for CopyObject's empty one
 * and, with a put_mode, a PUT's). Returns 1 to reset the connection. */
static int handle(fake *f, int fd) {
  char buf[16384];
  size_t have = 0;
  char *end;
  while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
    if (have == sizeof(buf) - 1)
      return 0;
    ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
    if (n <= 0)
      return 0;
    have += (size_t)n;
  }
  buf[have] = '\0';
  char method[16], target[4096];
  if (sscanf(buf, "%15s %4095s", method, target) != 2)
    return 0;
  char *q = strchr(target, '?');
  if (q)
    *q++ = '\0';
  const char *path = target + strlen("/" FAKE_BUCKET);
  const char *name = !strncmp(path, "/" FAKE_PREFIX "/", strlen(FAKE_PREFIX) + 2)
                         ? path + strlen(FAKE_PREFIX) + 2
                         : NULL;
  if (!strcmp(method, "GET") && !name) {
    if (q && strstr(q, "uploads"))
      uploads_reply(f, fd, q);
    else
      list_reply(f, fd);
  } else if (!strcmp(method, "GET") && name) {
    return get_reply(f, fd, name, buf);
  } else if (!strcmp(method, "HEAD") && name) {
    head_reply(f, fd, name);
  } else if (!strcmp(method, "PUT") && name && strcasestr(buf, "x-amz-copy-source:")) {
    copy_reply(f, fd, name, buf);
  } else if (!strcmp(method, "PUT") && name && f->put_mode != PUT_NONE) {
    end[2] = '\0'; /* the headers alone, each line ending in CRLF */
    put_reply(f, fd, buf, have - (size_t)(end + 4 - buf));
  } else if (!strcmp(method, "DELETE") && name) {
    delete_reply(f, fd, name);
  } else {
    f->n_other++;
    sendf(fd, "HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  }
  return 0;
}

static void *serve(void *arg) {
  fake *f = arg;
  for (;;) {
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
      return NULL;
    if (!handle(f, fd))
      shutdown(fd, SHUT_WR);
    close(fd);
  }
}

void fake_start(fake *f) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof(a);
  pthread_mutex_init(&f->mu, NULL);
  for (int i = 0; i < f->nobj; i++)
    if (!f->objs[i].etag[0])
      set_etag(&f->objs[i], 0);
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(f->lfd >= 0);
  ASSERT_OK(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)));
  ASSERT_OK(listen(f->lfd, 16));
  ASSERT_OK(getsockname(f->lfd, (struct sockaddr *)&a, &al));
  f->port = ntohs(a.sin_port);
  ASSERT_OK(pthread_create(&f->thread, NULL, serve, f));
}

void fake_stop(fake *f) {
  f->stop = 1;
  shutdown(f->lfd, SHUT_RDWR);
  pthread_join(f->thread, NULL);
  close(f->lfd);
  for (int i = 0; i < f->nobj; i++)
    free(f->objs[i].data);
  pthread_mutex_destroy(&f->mu);
}
