package redisadmin

import (
	"runtime/metrics"
	"strconv"
	"strings"
)

// Section is one INFO section. Fields is called only when INFO selects
// the section, so a costly figure costs nothing to an INFO that skips it.
type Section struct {
	Name   string             // its title, such as "Upstream"; INFO upstream selects it
	Fields func() [][2]string // name and value pairs, in order; nil for none
}

// Info is INFO's reply text for the sections args select (INFO's
// arguments after its name; none, all, default or everything select every
// one; sluice selects every added one). The sections of redis come in
// their order; an added section named as one of them (Memory) adds its
// fields to it, selected by either name; the other added sections come
// before Keyspace, as Redis writes its keyspace last.
func Info(args [][]byte, redis, added []Section) string {
	want := func(section string) bool {
		if len(args) == 0 {
			return true
		}
		for _, a := range args {
			if s := string(a); strings.EqualFold(s, section) || strings.EqualFold(s, "all") ||
				strings.EqualFold(s, "default") || strings.EqualFold(s, "everything") {
				return true
			}
		}
		return false
	}
	find := func(list []Section, name string) *Section {
		for i := range list {
			if strings.EqualFold(list[i].Name, name) {
				return &list[i]
			}
		}
		return nil
	}
	var b strings.Builder
	write := func(fields func() [][2]string) {
		if fields == nil {
			return
		}
		for _, f := range fields() {
			b.WriteString(f[0] + ":" + f[1] + "\r\n")
		}
	}
	section := func(name string, fields func() [][2]string) {
		more := find(added, name)
		if !want(name) && !(more != nil && want("sluice")) {
			return
		}
		b.WriteString("# " + name + "\r\n")
		write(fields)
		if more != nil {
			write(more.Fields)
		}
		b.WriteString("\r\n")
	}
	rest := func() {
		for _, sec := range added {
			if find(redis, sec.Name) == nil {
				section(sec.Name, nil)
			}
		}
	}
	restDone := false
	for _, sec := range redis {
		if strings.EqualFold(sec.Name, "keyspace") {
			rest()
			restDone = true
		}
		section(sec.Name, sec.Fields)
	}
	if !restDone {
		rest()
	}
	return strings.TrimSuffix(b.String(), "\r\n")
}

// HeapInUse is Go's heap in use: the bytes of heap objects and the unused
// room in their spans (runtime.MemStats.HeapInuse), read without stopping
// the world. INFO gives it as used_memory, as Redis gives its allocator's
// figure.
func HeapInUse() uint64 {
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(m)
	var n uint64
	for _, v := range m {
		if v.Value.Kind() == metrics.KindUint64 {
			n += v.Value.Uint64()
		}
	}
	return n
}

// BytesToHuman writes n as Redis writes used_memory_human: 1003B, 4.03K,
// 100.00M, 2.32G.
func BytesToHuman(n uint64) string {
	f := float64(n)
	switch {
	case n < 1<<10:
		return strconv.FormatUint(n, 10) + "B"
	case n < 1<<20:
		return strconv.FormatFloat(f/(1<<10), 'f', 2, 64) + "K"
	case n < 1<<30:
		return strconv.FormatFloat(f/(1<<20), 'f', 2, 64) + "M"
	default:
		return strconv.FormatFloat(f/(1<<30), 'f', 2, 64) + "G"
	}
}
