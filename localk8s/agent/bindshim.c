/* The process node's answer to a pod that listens on the wildcard address.
 *
 * Every pod shares this machine's network, so a program that binds 0.0.0.0 or :: (the z2jh
 * proxy's `--ip=`, the hub's `http://:8081`, Jupyter's `--ip=0.0.0.0`) would take that port
 * from every other pod. Preloaded into each container (LD_PRELOAD), this turns such a bind
 * into one on the pod's own address (GPUHUB_POD_IP): 0.0.0.0 becomes the pod IP, a
 * dual-stack :: becomes the pod IP mapped into IPv6 (::ffff:<pod IP>), and an IPv6-only ::
 * (which a pod here has no address of its own for) becomes ::1 at a port of its own, so that
 * a server that binds both families, as Tornado does, serves IPv4 on the pod IP. Programs
 * that call libc's bind (Python, Node/libuv, C) are covered; statically linked ones (Go) are
 * not. Built by the node agent with the machine's C compiler (localk8s/agent/shim.py).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind)
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *pod_ip = getenv("GPUHUB_POD_IP");
    struct in_addr ip;
    if (!addr || !pod_ip || inet_pton(AF_INET, pod_ip, &ip) != 1)
        return real_bind(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            in4.sin_addr = ip;
            return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
            int v6only = 0;
            socklen_t size = sizeof v6only;
            if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && !v6only) {
                memset(&in6.sin6_addr, 0, sizeof in6.sin6_addr);
                in6.sin6_addr.s6_addr[10] = 0xff;
                in6.sin6_addr.s6_addr[11] = 0xff;
                memcpy(&in6.sin6_addr.s6_addr[12], &ip, 4);
            } else {
                in6.sin6_addr = in6addr_loopback;
                in6.sin6_port = 0;
            }
            return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
        }
    }
    return real_bind(fd, addr, len);
}
