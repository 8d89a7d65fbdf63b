package evloop

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read and Write are read(2) and write(2) on a non-blocking descriptor
// for a loop's handlers, made without telling Go's scheduler that the
// goroutine enters a system call (unix.Read and unix.Write do).
//
// Why: a loop is one goroutine serving every connection on it, and a
// goroutine that leaves a system call which took long enough for the
// scheduler to hand its processor to another one waits for a processor
// again, behind every goroutine that is runnable then. Under a flood that
// keeps a thousand goroutines of the other doors runnable, that was
// seconds a read, a turn of the loop took 12 s (bench/doorflood, all
// three doors flooded), and every client on the loop waited for it. On a
// non-blocking descriptor a call never waits: it copies what is there
// (at most one read's room) and returns, so holding the processor through
// it costs the others nothing they would notice.
func Read(fd int, p []byte) (int, error) { return rawIO(unix.SYS_READ, fd, p) }

// Write is write(2) as Read is read(2); see Read.
func Write(fd int, p []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, p) }

// rawIO is Read's and Write's system call, trap, on fd and p's bytes.
func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if errno != 0 {
		return -1, errno
	}
	return int(n), nil
}

// pollNow is epoll_wait(2) with a zero timeout, which never blocks: see
// Read for why it is made so. It is epoll_pwait with no signal mask, the
// call every architecture has (arm64 has no epoll_wait).
func pollNow(ep int, events []unix.EpollEvent) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
