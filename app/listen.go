package app

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// parsePerm reads --listen-perm: octal permission bits such as 660; ""
// leaves the socket as the umask made it.
func parsePerm(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o777 {
		return 0, fmt.Errorf("invalid --listen-perm %q: want octal permission bits such as 660", s)
	}
	return fs.FileMode(n), nil
}

// listenRESP listens on the RESP address: host:port, or a Unix socket
// (unix:PATH). A socket costs less per request than TCP over loopback, as
// neither end runs the TCP stack: a sidecar's application can reach it
// through a volume both containers mount. A socket file left by a process
// that has gone is replaced; one that a live process serves is not. The
// file is removed when the listener closes.
func listenRESP(addr, perm string) (net.Listener, error) {
	path := SocketPath(addr)
	if path == "" {
		return net.Listen("tcp", addr)
	}
	mode, err := parsePerm(perm)
	if err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := listenUnix(path, mode)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

// removeStaleSocket removes the socket file at path unless a process
// accepts connections on it. Anything else at path is left, and an error.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen %s: the path exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("listen %s: another process serves this socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("listen %s: cannot tell whether the socket is in use: %w", path, err)
	}
	return os.Remove(path)
}
