package selection

// Route is the secret-free transport fact of one prepared model route: what
// OpenClaw passes to a harness's supports(ctx) as ctx.modelProvider. On the
// wire it is the attempt's modelProvider (and each entry of routes).
type Route struct {
	// RuntimePolicy lists the runtime ids the provider declares compatible with
	// this concrete route. Nil means the provider declared nothing, which is not
	// support.
	RuntimePolicy *RuntimePolicy `json:"runtimePolicy,omitempty"`
	// RequestTransportOverrides is "none" or "present" (hand-written headers,
	// auth transport, proxy, TLS, ... exist; their values never travel).
	RequestTransportOverrides string `json:"requestTransportOverrides,omitempty"`
	// PreparedAuth names who owns auth for this route (for example
	// {"source": "harness"}). It is an owner fact, never a permission to infer
	// route support, and carries no secret.
	PreparedAuth *PreparedAuth `json:"preparedAuth,omitempty"`
}

// RuntimePolicy is the provider's route-level compatibility declaration.
type RuntimePolicy struct {
	CompatibleIDs []string `json:"compatibleIds"`
}

// PreparedAuth is the secret-free fact of how auth for a route was prepared.
type PreparedAuth struct {
	Source string `json:"source,omitempty"`
}

// Overrides values.
const (
	OverridesNone    = "none"
	OverridesPresent = "present"
)
