// Umbrella header for attention parameters and variants.
#pragma once

#include "lazyattn/attention/params.hpp"
#include "lazyattn/attention/variants.hpp"
