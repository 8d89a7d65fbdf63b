package app

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/settings"
)

// listenRESP listens on the RESP address: host:port, or a Unix socket
// (unix:PATH). A socket costs less per request than TCP over loopback, as
// neither end runs the TCP stack: a sidecar's application can reach it
// through a volume both containers mount. A socket file left by a process
// that has gone is replaced; one that a live process serves is not. The
// file is removed when the listener closes.
func listenRESP(addr, perm string) (net.Listener, error) {
	path := settings.SocketPath(addr)
	if path == "" {
		return net.Listen("tcp", addr)
	}
	mode, err := settings.ParsePerm(perm)
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
