/* The process node's answer to a pod that listens on the wildcard address or on localhost.
 *
 * Every pod shares this machine's network, so a program that binds 0.0.0.0 or :: (the z2jh
 * proxy's `--ip=`, the hub's `http://:8081`, Jupyter's `--ip=0.0.0.0`) would take that port
 * from every other pod. Preloaded into each container (LD_PRELOAD), this turns such a bind
 * into one on the pod's own address (GPUHUB_POD_IP): 0.0.0.0 becomes the pod IP, a
 * dual-stack :: becomes the pod IP mapped into IPv6 (::ffff:<pod IP>), and an IPv6-only ::
 * (which a pod here has no address of its own for) becomes ::1 at a port of its own, so that
 * a server that binds both families, as Tornado does, serves IPv4 on the pod IP.
 *
 * A pod's localhost is its own on a kubelet: two hub pods each run configurable-http-proxy
 * with its API on 127.0.0.1:8001, and each hub reaches its own. So a bind to 127.0.0.1 becomes
 * one on the pod IP too (::1 is treated as an IPv6-only ::), and a connect to 127.0.0.1:<port>
 * goes to the pod IP when the pod listens there (the kernel's /proc/net/tcp and tcp6 say so),
 * which also reaches a server of the pod bound to the wildcard, as it would in a pod; any
 * other connect to 127.0.0.1 (the apiserver, which pods are told is at 127.0.0.1) is left as
 * it is. Programs that call libc's bind and connect (Python, Node/libuv, C) are covered;
 * statically linked ones (Go) are not. Built by the node agent with the machine's C compiler
 * (localk8s/agent/shim.py).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

/* The pod's address, or 0 where the container was not given one. */
static int pod_address(struct in_addr *ip) {
    const char *pod_ip = getenv("GPUHUB_POD_IP");
    return pod_ip && inet_pton(AF_INET, pod_ip, ip) == 1;
}

/* Whether a TCP socket listens on the pod IP (or the pod IP mapped into IPv6) at port. */
static int pod_listens(struct in_addr ip, unsigned port) {
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    struct in6_addr mapped;
    memset(&mapped, 0, sizeof mapped);
    mapped.s6_addr[10] = 0xff;
    mapped.s6_addr[11] = 0xff;
    memcpy(&mapped.s6_addr[12], &ip, 4);
    int found = 0;
    for (int t = 0; t < 2 && !found; t++) {
        FILE *table = fopen(tables[t], "re");
        if (!table)
            continue;
        char line[512];
        if (!fgets(line, sizeof line, table)) { /* the header */
            fclose(table);
            continue;
        }
        while (!found && fgets(line, sizeof line, table)) {
            unsigned word[4], local_port, state;
            if (t == 0) {
                /* "  0: 0200327F:1F40 00000000:0000 0A ..." (the address as the kernel stores it) */
                if (sscanf(line, " %*d: %8X:%X %*X:%*X %X", &word[0], &local_port, &state) == 3)
                    found = state == 0x0A && local_port == port && word[0] == ip.s_addr;
            } else if (sscanf(line, " %*d: %8X%8X%8X%8X:%X %*X:%*X %X", &word[0], &word[1],
                              &word[2], &word[3], &local_port, &state) == 6) {
                found = state == 0x0A && local_port == port &&
                        memcmp(word, mapped.s6_addr, sizeof word) == 0;
            }
        }
        fclose(table);
    }
    return found;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind)
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    struct in_addr ip;
    if (!addr || !pod_address(&ip))
        return real_bind(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY) ||
            in4.sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
            in4.sin_addr = ip;
            return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) || IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr)) {
            int v6only = 0;
            socklen_t size = sizeof v6only;
            if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) &&
                getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && !v6only) {
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

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real_connect;
    if (!real_connect)
        real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    struct in_addr ip;
    if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in) &&
        pod_address(&ip)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
            pod_listens(ip, ntohs(in4.sin_port))) {
            in4.sin_addr = ip;
            return real_connect(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    }
    return real_connect(fd, addr, len);
}
