/* test_http_client.h - a loopback HTTP client for the unit tests of the
 * servers over ctrain_httpd (test_common_httpd, test_progress): connect,
 * send a whole request, read the response until the server closes. Static
 * inline functions; include from the test file. */
#ifndef CTRAIN_TEST_HTTP_CLIENT_H
#define CTRAIN_TEST_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "test.h"

static inline int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT(fd >= 0);
  ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof(a)));
  return fd;
}

/* Reads until the server closes (5 s at most); the status code. */
static inline int read_resp(int fd, char *resp, size_t cap) {
  size_t len = 0;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ASSERT_EQ(poll(&p, 1, 5000), 1);
    ssize_t r = recv(fd, resp + len, cap - 1 - len, 0);
    ASSERT(r >= 0);
    if (r == 0)
      break;
    len += (size_t)r;
    ASSERT_LT(len, cap - 1);
  }
  resp[len] = '\0';
  int code = 0;
  if (sscanf(resp, "HTTP/1.1 %d", &code) != 1)
    TEST_FAIL_("not an HTTP/1.1 response: \"%s\"", resp);
  return code;
}

static inline int http_raw(int port, const char *raw, char *resp, size_t cap) {
  int fd = connect_to(port);
  size_t n = strlen(raw);
  ASSERT_EQ(send(fd, raw, n, MSG_NOSIGNAL), (long long)n);
  int code = read_resp(fd, resp, cap);
  close(fd);
  return code;
}

static inline const char *body_of(const char *resp) {
  const char *b = strstr(resp, "\r\n\r\n");
  ASSERT_NOT_NULL(b);
  return b + 4;
}

#endif
