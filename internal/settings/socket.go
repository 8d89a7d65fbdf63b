package settings

import (
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
)

// unixPrefix marks a --listen address that is a Unix socket's path.
const unixPrefix = "unix:"

// SocketPath is the path of a Unix socket address (unix:PATH), or "".
func SocketPath(addr string) string {
	if path, ok := strings.CutPrefix(addr, unixPrefix); ok {
		return path
	}
	return ""
}

// ParsePerm reads --listen-perm: octal permission bits such as 660; ""
// leaves the socket as the umask made it.
func ParsePerm(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o777 {
		return 0, fmt.Errorf("invalid --listen-perm %q: want octal permission bits such as 660", s)
	}
	return fs.FileMode(n), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
