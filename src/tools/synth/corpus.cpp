// A small built-in English + code + chat corpus the synthetic tokenizer is trained on, so that
// every synthetic checkpoint directory is complete (tokenizer.json, chat template) without any
// download. Content is fixed: the trained tokenizer is deterministic.
#include <string>
#include <string_view>

namespace nemo::synth {

std::string_view training_corpus() {
  static const std::string corpus = R"(The quick brown fox jumps over the lazy dog. A language model reads a
sequence of tokens and predicts the next one. Nemotron-H is a hybrid model: most of its layers are
Mamba-2 state space layers, a few are attention layers, and the rest are mixture-of-experts layers
with relu squared experts. The state space layers keep a fixed-size state per sequence, so long
prompts do not grow their memory; the attention layers keep a key and value cache that grows with
the context. Speculative decoding lets a small drafter propose several tokens that the large model
then verifies in one forward pass; when the verification is exact, the output is the same as if the
large model had generated every token alone.

Hello! How are you today? I am fine, thank you. What is the weather like in Paris? It is sunny and
warm, about twenty-five degrees. Please write a short poem about the sea. The sea is wide, the sea is
deep, it sings the sailors fast asleep. Can you help me with my homework? Of course: what is the
question? What is 12 times 12? It is 144. And 7 plus 35? That makes 42.

def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) std::printf("%s\n", argv[i]);
  return 0;
}

{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
What is the capital of France?<|im_end|>
<|im_start|>assistant
<think>
The user asks for the capital of France. That is Paris.
</think>
The capital of France is Paris.<|im_end|>
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2026 3.14159 -42 1e-5.
Unicode: café, naïve, Zürich, 東京, 北京, Москва, नमस्ते, 🙂🚀.
)";
  return corpus;
}

}  // namespace nemo::synth
