// The README's library example, compiled against the installed package so that it stays true.
#include <trident/trident.h>

#include <iostream>

int main() {
  using namespace trident;
  auto& registry = DeviceRegistry::global();             // finds CUDA GPUs, OpenCL devices, the CPU
  std::vector<Device*> devices = registry.selected_devices();  // TRIDENT_DEVICES or the best one
  DatasetSplits data = load_dataset(default_data_directory());  // IDX directory or .npz
  TrainOptions options;                                   // batch 200, SGD lr 0.01 momentum 0.5
  Trainer trainer(devices, [] { return make_seed_cnn(); }, data, options);  // a replica per device
  for (int epoch = 1; epoch <= 5; ++epoch) {
    EpochStats s = trainer.train_epoch();
    EvalStats e = trainer.evaluate();
    std::cout << "epoch " << epoch << " loss " << s.train_loss
              << " accuracy " << e.accuracy << "\n";
  }
  trainer.save_checkpoint("cnn.safetensors");
}
