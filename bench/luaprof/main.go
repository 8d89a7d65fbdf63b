// Command luaprof counts the Lua bytecodes the batch script runs per
// decision, line by line: what a decision costs Redis is mostly how many
// bytecodes run for it (about 50 instructions each inside Redis), and
// this says which lines they are. It runs the script under Debian's
// lua5.1 (apt-get install lua5.1) outside Redis, with a stand-in for
// redis.call, as a library runs it: defined once, called many times.
//
//	go run ./bench/luaprof -scenario policy2 -size 16
package main

import (
	_ "embed"
	"flag"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/sluice-rl/sluice/lua"
)

//go:embed prof.lua
var harness string

func main() {
	scenario := flag.String("scenario", "fresh", "fresh (GCRA on idle keys), second (a fixed daily window) or policy2 (both, all-or-nothing)")
	size := flag.Int("size", 16, "requests a call")
	calls := flag.Int("calls", 50, "calls counted")
	lines := flag.Int("lines", 30, "lines shown, the busiest first")
	interp := flag.String("lua", "lua5.1", "the Lua 5.1 interpreter")
	flag.Parse()
	dir, err := os.MkdirTemp("", "sluice-luaprof-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	script, prof := filepath.Join(dir, "batch.lua"), filepath.Join(dir, "prof.lua")
	for path, text := range map[string]string{script: lua.Batch.Source, prof: harness} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	cmd := exec.Command(*interp, prof, script, *scenario, strconv.Itoa(*size), strconv.Itoa(*calls), strconv.Itoa(*lines))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("%s: %v", *interp, err)
	}
}
