//go:build unix

package app

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
)

// listenUnix listens on a Unix socket at path whose mode is mode (0: the
// umask's). The socket is bound, and its mode set, before it listens: a
// client that connects in between is refused, so none gets in while the
// file still has the umask's mode.
func listenUnix(path string, mode fs.FileMode) (*net.UnixListener, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // FileListener listens on a duplicate
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(path)
		}
	}()
	if mode != 0 {
		if err := os.Chmod(path, mode); err != nil {
			return nil, fmt.Errorf("--listen-perm: %w", err)
		}
	}
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		return nil, err
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	ok = true
	return ln.(*net.UnixListener), nil
}
