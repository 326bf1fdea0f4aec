// Activation functions shared by the unary and gated ops.

const float GELU_COEF_A = 0.044715;
const float SQRT_2_OVER_PI = 0.79788456080286535587989211986876;

float silu(float x) {
    return x / (1.0 + exp(-x));
}

// GELU, tanh approximation. The tanh argument is clamped: beyond +-15 tanh
// is +-1 in f32, and some implementations overflow on large inputs.
float gelu(float x) {
    const float t = clamp(SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x), -15.0, 15.0);
    return 0.5 * x * (1.0 + tanh(t));
}
