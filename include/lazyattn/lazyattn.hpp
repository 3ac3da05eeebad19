// Umbrella header for the whole host-safe core: dtypes, errors, RoPE, the KV store, attention.
#pragma once

#include "lazyattn/attention.hpp"
#include "lazyattn/config.hpp"
#include "lazyattn/dtype.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv.hpp"
#include "lazyattn/rope.hpp"
