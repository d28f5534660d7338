// The README's library example, compiled against the installed package so that it stays true.
#include <trident/trident.h>
#include <trident/models/trainer.h>
#include <iostream>

int main() {
  using namespace trident;
  auto& registry = DeviceRegistry::global();            // finds CUDA GPUs, OpenCL devices, the CPU
  std::vector<Device*> devices = registry.selected_devices();   // TRIDENT_DEVICES or the best one
  MnistSplits data = load_mnist_directory(default_data_directory());
  TrainOptions options;                                  // batch 200, SGD lr 0.01 momentum 0.5
  options.model = "cnn";
  Trainer trainer(devices, options, data);              // one replica per device
  for (int epoch = 1; epoch <= 5; ++epoch) {
    EpochStats s = trainer.train_epoch();
    EvalStats e = trainer.evaluate();
    std::cout << "epoch " << epoch << " loss " << s.train_loss
              << " accuracy " << e.accuracy << "\n";
  }
  trainer.save_checkpoint("cnn.safetensors");
}
