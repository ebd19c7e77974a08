package server

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// The Host check against DNS rebinding: a web page on an attacker's name
// that resolves to a node's address (or to 127.0.0.1) would otherwise read
// the API and the page from the operator's browser, which sends the
// attacker's name in Host. A browser never sends a name it was not given,
// so accepting only the names the node is known by closes that door.
//
// Accepted: loopback names (localhost, *.localhost) and addresses; the
// listen address's host as written; the address the connection arrived on;
// any IP address when the listen address is unspecified (0.0.0.0, ::, "");
// and the names in [http] hosts. No port is compared: the attack uses the
// node's own port.
//
// /healthz, /readyz and /metrics are not checked: probes and Prometheus
// address a node by whatever name their own service discovery knows, and
// these endpoints are open to any client that reaches the port anyway
// (README, "The HTTP endpoints").

// hostGuard holds what a request's Host may name.
type hostGuard struct {
	listenHost  string // lower case, no brackets; "" when unspecified
	unspecified bool   // 0.0.0.0, :: or no host: any IP literal is ours
	names       map[string]bool
}

func newHostGuard(listen string, hosts []string) *hostGuard {
	h, _, err := net.SplitHostPort(listen)
	if err != nil {
		h = listen
	}
	h = normHost(h)
	ip := net.ParseIP(h)
	g := &hostGuard{listenHost: h, unspecified: h == "" || (ip != nil && ip.IsUnspecified()), names: map[string]bool{}}
	for _, n := range hosts {
		g.names[normHost(n)] = true
	}
	return g
}

// probePaths are served whatever the Host (see above).
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// wrap refuses, with 421 Misdirected Request, a request whose Host is not
// one of the node's.
func (g *hostGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probePaths[r.URL.Path] || g.allows(r) {
			next.ServeHTTP(w, r)
			return
		}
		shown := r.Host
		if len(shown) > 100 {
			shown = shown[:100] + "..."
		}
		writeError(w, http.StatusMisdirectedRequest, "unknown_host", fmt.Sprintf(
			"this node does not answer to Host %q (a guard against DNS rebinding): reach it by its listen address or a loopback name, or add the name to [http] hosts in its config", shown))
	})
}

func (g *hostGuard) allows(r *http.Request) bool {
	h, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		h = r.Host // no port
	}
	h = normHost(h)
	switch {
	case h == "":
		return false // HTTP/1.0 without Host: no browser sends that
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	case h == g.listenHost || g.names[h]:
		return true
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || g.unspecified {
		return true
	}
	// The address the client reached: it named the node by its address.
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ta, ok := la.(*net.TCPAddr); ok && ta.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// normHost lower-cases a host and drops IPv6 brackets and a trailing dot
// ("example.com." names example.com).
func normHost(h string) string {
	h = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	return strings.TrimSuffix(h, ".")
}
