/* Pins wildcard listens to one address.
 *
 * TensorFlow's gRPC server always listens on every interface ("0.0.0.0:port",
 * which gRPC opens as a dual-stack "[::]:port"), and it has no authentication:
 * whoever reaches the port can run graph ops on the machine. ngra_tf's workers
 * and cluster clients run with this library preloaded (LD_PRELOAD, see
 * ngra_tf/parallel/cluster.py) and NGRA_TF_LISTEN_ON set to the address the
 * user chose; bind() then gives a wildcard address that one instead. Any
 * other bind is passed through unchanged. Without NGRA_TF_LISTEN_ON it does nothing.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_function)(int, const struct sockaddr *, socklen_t);

static int real_bind(int fd, const struct sockaddr *address, socklen_t length) {
  static bind_function next;
  if (next == NULL) next = (bind_function)dlsym(RTLD_NEXT, "bind");
  return next(fd, address, length);
}

int bind(int fd, const struct sockaddr *address, socklen_t length) {
  const char *target = getenv("NGRA_TF_LISTEN_ON");
  struct in_addr v4;
  struct in6_addr v6;
  int is_v4 = target != NULL && inet_pton(AF_INET, target, &v4) == 1;
  int is_v6 = target != NULL && inet_pton(AF_INET6, target, &v6) == 1;
  if (address == NULL || !(is_v4 || is_v6)) return real_bind(fd, address, length);

  if (address->sa_family == AF_INET && length >= (socklen_t)sizeof(struct sockaddr_in)) {
    struct sockaddr_in pinned;
    memcpy(&pinned, address, sizeof pinned);
    if (pinned.sin_addr.s_addr != htonl(INADDR_ANY)) return real_bind(fd, address, length);
    if (!is_v4) {  /* an IPv6 target: no IPv4 address of ours to listen on */
      errno = EADDRNOTAVAIL;
      return -1;
    }
    pinned.sin_addr = v4;
    return real_bind(fd, (const struct sockaddr *)&pinned, sizeof pinned);
  }
  if (address->sa_family == AF_INET6 && length >= (socklen_t)sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 pinned;
    memcpy(&pinned, address, sizeof pinned);
    if (!IN6_IS_ADDR_UNSPECIFIED(&pinned.sin6_addr)) return real_bind(fd, address, length);
    if (is_v6) {
      pinned.sin6_addr = v6;
    } else {  /* an IPv4 target on a dual-stack socket: its IPv4-mapped address */
      int dual_stack = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &dual_stack, sizeof dual_stack);
      memset(&pinned.sin6_addr, 0, sizeof pinned.sin6_addr);
      pinned.sin6_addr.s6_addr[10] = 0xff;
      pinned.sin6_addr.s6_addr[11] = 0xff;
      memcpy(&pinned.sin6_addr.s6_addr[12], &v4, sizeof v4);
    }
    return real_bind(fd, (const struct sockaddr *)&pinned, sizeof pinned);
  }
  return real_bind(fd, address, length);
}
