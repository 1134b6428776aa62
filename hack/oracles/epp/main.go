// The endpoint-picker oracle: loads an EndpointPickerConfig text with the picker's own config
// loader (gateway-api-inference-extension's pkg/epp/config/loader, LoadRawConfig then
// InstantiateAndConfigure, as cmd/epp/runner does at start-up) and prints, as JSON, what the
// picker would run with: each instantiated plugin's effective parameters (its `config` struct
// after the factory's defaults, read by reflection) and the capacity of the prefix index it
// built, the scheduling profiles after the loader's defaults, or the loader's error.
//
// Built by hack/oracles/epp/build against the module at a pinned version; the plugin registry
// is the runner's own (registry_gen.go, generated from cmd/epp/runner/runner.go of that
// version).
//
// Usage: epp-oracle [FILE]   (the config text on stdin without FILE)
// Exit status 0 with {"ok": true, ...} or {"ok": false, "stage": ..., "error": ...}; 2 when the
// text cannot be read.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// Set by the build (-X): the module whose loader and registry run, its version, and the
// llm-d-inference-scheduler release whose go.mod requires that version ("" when none is pinned).
var (
	module  = "unknown"
	version = "unknown"
	baseOf  = ""
)

type pluginOut struct {
	Type string `json:"type"`
	// Whether the config text's plugins list declares it (false: the loader added it).
	Declared   bool           `json:"declared"`
	Parameters map[string]any `json:"parameters,omitempty"`
	// Entries per server of the prefix index the plugin built (its indexer's LRU size).
	IndexCapacity *int64 `json:"indexCapacity,omitempty"`
}

type profileRef struct {
	PluginRef string   `json:"pluginRef"`
	Weight    *float64 `json:"weight,omitempty"`
}

type result struct {
	Module   string                  `json:"module"`
	Version  string                  `json:"version"`
	BaseOf   string                  `json:"baseOf,omitempty"`
	OK       bool                    `json:"ok"`
	Stage    string                  `json:"stage,omitempty"`
	Error    string                  `json:"error,omitempty"`
	Plugins  map[string]pluginOut    `json:"plugins,omitempty"`
	Profiles map[string][]profileRef `json:"profiles,omitempty"`
}

func main() {
	var text []byte
	var err error
	if len(os.Args) > 1 {
		text, err = os.ReadFile(os.Args[1])
	} else {
		text, err = io.ReadAll(os.Stdin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "epp-oracle:", err)
		os.Exit(2)
	}
	out, err := json.MarshalIndent(load(text), "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "epp-oracle:", err)
		os.Exit(2)
	}
	fmt.Println(string(out))
}

func load(text []byte) result {
	// The plugins log through controller-runtime's logger; the oracle prints JSON alone.
	ctrllog.SetLogger(logr.Discard())
	logger := logr.Discard()
	res := result{Module: module, Version: version, BaseOf: baseOf}
	registerInTree()

	raw, _, err := loader.LoadRawConfig(text, logger)
	if err != nil {
		res.Stage, res.Error = "load", err.Error()
		return res
	}
	declared := map[string]bool{}
	for _, spec := range raw.Plugins {
		declared[spec.Name] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the plugins' background loops
	handle := fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil })
	if _, err := loader.InstantiateAndConfigure(raw, handle, logger); err != nil {
		res.Stage, res.Error = "instantiate", err.Error()
		return res
	}
	res.OK = true
	res.Plugins = map[string]pluginOut{}
	for name, p := range handle.GetAllPluginsWithNames() {
		params, capacity := effective(p)
		res.Plugins[name] = pluginOut{
			Type:          p.TypedName().Type,
			Declared:      declared[name],
			Parameters:    params,
			IndexCapacity: capacity,
		}
	}
	res.Profiles = map[string][]profileRef{}
	for _, prof := range raw.SchedulingProfiles {
		refs := []profileRef{}
		for _, ref := range prof.Plugins {
			refs = append(refs, profileRef{PluginRef: ref.PluginRef, Weight: ref.Weight})
		}
		// The loader appends defaults in map order: sorted, the output is stable.
		sort.Slice(refs, func(i, j int) bool { return refs[i].PluginRef < refs[j].PluginRef })
		res.Profiles[prof.Name] = refs
	}
	return res
}

// effective reads a plugin's unexported `config` struct (the parameters its factory settled
// on: the text's values over the defaults) and the size of any prefix indexer it holds.
func effective(p fwkplugin.Plugin) (map[string]any, *int64) {
	v := deref(reflect.ValueOf(p))
	if v.Kind() != reflect.Struct {
		return nil, nil
	}
	var params map[string]any
	if cfg := deref(v.FieldByName("config")); cfg.IsValid() && cfg.Kind() == reflect.Struct {
		params = scalars(cfg)
	}
	var capacity *int64
	for i := 0; i < v.NumField(); i++ {
		f := deref(v.Field(i))
		if f.Kind() != reflect.Struct {
			continue
		}
		if size := f.FieldByName("defaultLRUSize"); size.IsValid() && size.CanInt() {
			n := size.Int()
			capacity = &n
		}
	}
	return params, capacity
}

// scalars maps a struct's scalar fields by their JSON names.
func scalars(v reflect.Value) map[string]any {
	out := map[string]any{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		if name == "" || name == "-" {
			name = t.Field(i).Name
		}
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			out[name] = f.Bool()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			out[name] = f.Int()
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			out[name] = f.Uint()
		case reflect.Float32, reflect.Float64:
			out[name] = f.Float()
		case reflect.String:
			out[name] = f.String()
		}
	}
	return out
}

// deref follows pointers and interfaces to the value they hold (invalid for nil).
func deref(v reflect.Value) reflect.Value {
	for v.IsValid() && (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}
