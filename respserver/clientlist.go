package respserver

import (
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/internal/resp"
)

// CLIENT LIST, CLIENT INFO and CLIENT KILL, as Redis 7 answers them.
//
// A connection's fields belong to the goroutine or loop serving it, so
// what another connection reads of it is either set before it is shared
// (id, addresses, the loop), kept in atomics written once a read (idle,
// qbuf) or on a change of command (cmd), or written under its infoMu
// (name, lib-name, lib-ver, resp). Killing one is asked of whatever
// serves it (kill), never done to its descriptor from elsewhere.

// clientType is CLIENT KILL's and CLIENT LIST's TYPE. Every Sluice
// connection is normal (Redis counts a monitor as normal too); the others
// are known names that match no connection here.
type clientType int8

const (
	anyType clientType = iota
	normalType
	otherType // master, replica (slave), pubsub
)

// parseClientType reads a TYPE value as Redis does, in any case.
func parseClientType(b []byte) (clientType, string) {
	switch strings.ToLower(str(b)) {
	case "normal":
		return normalType, ""
	case "master", "slave", "replica", "pubsub":
		return otherType, ""
	}
	return anyType, unknownClientType(b)
}

// killFilter is what CLIENT KILL closes: the connections that match every
// field given.
type killFilter struct {
	oldForm bool // CLIENT KILL addr: +OK or "No such client", and the caller may kill itself
	addr    string
	laddr   string
	id      int64 // 0: any
	typ     clientType
	maxAge  time.Duration // 0: any; else only connections at least this old
	skipMe  bool
}

// parseKillFilter reads CLIENT KILL's arguments (args[0] is CLIENT),
// with Redis's error for each bad one. Fuzzed by FuzzClientKill.
func parseKillFilter(args [][]byte) (killFilter, string) {
	f := killFilter{skipMe: true}
	if len(args) == 3 {
		f.oldForm, f.addr, f.skipMe = true, string(args[2]), false
		return f, ""
	}
	if len(args) < 3 {
		return f, arityError("client|kill")
	}
	for i := 2; i < len(args); i += 2 {
		if i+1 == len(args) {
			return f, errSyntax
		}
		opt, val := strings.ToLower(str(args[i])), args[i+1]
		switch opt {
		case "id":
			n, why := resp.ParseInt(val)
			if why != "" || n < 1 {
				return f, errKillID
			}
			f.id = n
		case "maxage":
			n, why := resp.ParseInt(val)
			if why != "" {
				return f, errMaxAgeInteger
			}
			if n <= 0 {
				return f, errMaxAgePositive
			}
			f.maxAge = time.Duration(min(n, int64(time.Duration(1<<63-1)/time.Second))) * time.Second
		case "type":
			t, msg := parseClientType(val)
			if msg != "" {
				return f, msg
			}
			f.typ = t
		case "addr":
			f.addr = string(val)
		case "laddr":
			f.laddr = string(val)
		case "user":
			// Sluice has one user, default, as Redis without ACLs.
			if str(val) != "default" {
				return f, noSuchUser(val)
			}
		case "skipme":
			switch strings.ToLower(str(val)) {
			case "yes":
				f.skipMe = true
			case "no":
				f.skipMe = false
			default:
				return f, errSyntax
			}
		default:
			return f, errSyntax
		}
	}
	return f, ""
}

// matches tells whether the filter selects c, asked by self at now.
func (f *killFilter) matches(c, self *client, now time.Time) bool {
	switch {
	case f.addr != "" && c.addr != f.addr,
		f.laddr != "" && c.laddr != f.laddr,
		f.id != 0 && c.id != f.id,
		f.typ == otherType,
		f.skipMe && c == self,
		f.maxAge > 0 && now.Sub(c.created) < f.maxAge:
		return false
	}
	return true
}

// runClientKill closes the connections the filter selects: the caller's
// own after its reply, the others through whatever serves them.
func runClientKill(c *client, args [][]byte) {
	f, msg := parseKillFilter(args)
	if msg != "" {
		c.fail(msg)
		return
	}
	s, now := c.s, time.Now()
	killed := 0
	s.mu.Lock()
	for other := range s.conns {
		// One killed already is gone, as Redis frees a killed client at
		// once: its transport may not have counted it out yet.
		if other.killed.Load() || !f.matches(other, c, now) {
			continue
		}
		killed++
		if other == c {
			c.quit = true // answered first, then closed, as Redis's CLOSE_AFTER_REPLY
			continue
		}
		s.log.Debug("connection killed by CLIENT KILL", "id", other.id, "addr", other.addr, "by", c.id)
		other.kill()
	}
	s.mu.Unlock()
	switch {
	case !f.oldForm:
		c.out = redcon.AppendInt(c.out, int64(killed))
	case killed == 0:
		c.fail(errNoSuchClient)
	default:
		c.out = redcon.AppendOK(c.out)
	}
}

// kill closes c from another connection, through whatever serves it.
func (c *client) kill() {
	c.killed.Store(true)
	c.conn.Kill()
}

// runClientList is CLIENT LIST [TYPE type | ID id [id ...]].
func runClientList(c *client, args [][]byte) {
	var ids []int64
	typ := anyType
	switch {
	case len(args) == 4 && resp.Is(args[2], "type"):
		t, msg := parseClientType(args[3])
		if msg != "" {
			c.fail(msg)
			return
		}
		typ = t
	case len(args) > 3 && resp.Is(args[2], "id"):
		for _, a := range args[3:] {
			n, why := resp.ParseInt(a)
			if why != "" {
				c.fail(errInvalidClientID)
				return
			}
			ids = append(ids, n)
		}
	case len(args) != 2:
		c.fail(errSyntax)
		return
	}
	list := c.s.clientList()
	var b []byte
	if ids != nil {
		for _, id := range ids { // in the order asked, as Redis
			if i, ok := slices.BinarySearchFunc(list, id, func(o *client, id int64) int { return cmpInt(o.id, id) }); ok {
				b = c.s.appendClientInfo(b, list[i])
				b = append(b, '\n')
			}
		}
	} else if typ != otherType {
		for _, o := range list {
			b = c.s.appendClientInfo(b, o)
			b = append(b, '\n')
		}
	}
	c.out = resp.AppendVerbatim(c.out, b, c.proto)
}

// runClientInfo is CLIENT INFO: the caller's own CLIENT LIST line.
func runClientInfo(c *client, _ [][]byte) {
	b := c.s.appendClientInfo(nil, c)
	c.out = resp.AppendVerbatim(c.out, append(b, '\n'), c.proto)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// clientList is the connections, oldest first, as Redis lists them.
func (s *Server) clientList() []*client {
	s.mu.Lock()
	list := make([]*client, 0, len(s.conns))
	for c := range s.conns {
		list = append(list, c)
	}
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b *client) int { return cmpInt(a.id, b.id) })
	return list
}

// appendClientInfo writes one CLIENT LIST line of c. The figures Sluice
// measures: age, idle, flags (N, or O for a monitor), qbuf (input read,
// not yet run), qbuf-free (the rest of the input buffer), omem and
// tot-mem (a monitor's lines waiting for its socket; input and that),
// cmd, resp, name, lib-name and lib-ver.
func (s *Server) appendClientInfo(dst []byte, c *client) []byte {
	now := time.Now()
	info := redisadmin.Client{ID: c.id, Addr: c.addr, LAddr: c.laddr, FD: c.fd.Load(), Cmd: "NULL",
		Age:  int64(now.Sub(c.created) / time.Second),
		Idle: int64(now.Sub(time.Unix(0, c.active.Load())) / time.Second)}
	c.infoMu.Lock()
	info.Name, info.LibName, info.LibVer, info.Resp = c.name, c.libName, c.libVer, c.proto
	c.infoMu.Unlock()
	info.OMem, info.Monitor = s.monitors.Backlog(c)
	queued, held := c.queued.Load(), c.inputBytes()
	info.QBuf, info.QBufFree, info.TotMem = queued, max(held-queued, 0), held+info.OMem
	if p := c.lastCmd.Load(); p != nil {
		info.Cmd = *p
	}
	return redisadmin.AppendClientLine(dst, info)
}

// connFD is nc's descriptor, for CLIENT LIST's fd=; -1 when it has none.
func connFD(nc net.Conn) int32 {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := int32(-1)
	_ = raw.Control(func(s uintptr) { fd = int32(s) })
	return fd
}

// subcommandNames are the full names CLIENT LIST's cmd= gives the
// subcommands that store them (client|list), made once so that storing
// one allocates nothing.
var subcommandNames = func() map[string]*string {
	m := make(map[string]*string)
	for _, n := range []string{"client|setname", "client|getname", "client|setinfo", "client|id", "client|help",
		"client|list", "client|info", "client|kill", "client|tracking",
		"command|count", "command|list", "command|info", "command|docs", "command|help"} {
		m[n] = &n
	}
	return m
}()

// ranSubcommand records a subcommand as the connection's last command,
// under its full name; an unknown one leaves the command's own name.
func (c *client) ranSubcommand(cmd string, sub []byte) {
	if p := subcommandNames[cmd+"|"+strings.ToLower(str(sub))]; p != nil {
		c.lastCmd.Store(p)
		c.shown = nil // the next command stores its own name again
	}
}

// connAddrs are the addr and laddr CLIENT LIST shows for nc, and the
// address its MONITOR lines show. A Unix socket's clients have no address
// of their own: Redis shows the socket's path and port 0 for both, and
// unix:PATH on MONITOR lines, and so does Sluice.
func connAddrs(nc net.Conn) (addr, laddr, monAddr string) {
	if u, ok := nc.LocalAddr().(*net.UnixAddr); ok && u != nil {
		a := u.Name + ":0"
		return a, a, "unix:" + u.Name
	}
	addr = addrString(nc.RemoteAddr())
	return addr, addrString(nc.LocalAddr()), addr
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
