/**
 * The "Run on cluster" dialog: what to run (the kinds the server offers, as
 * it describes them), the resources within this user's limits
 * (from `GET /gpuhub/api/jobs/options`, worded like the spawn form), and
 * papermill parameters.
 *
 * The server is the judge: the dialog only hints at ranges; on submit it
 * posts and, if refused, shows the server's sentence next to the field the
 * server names and stays open. The inputs are built in `./fields.ts`, what
 * they mean and say in `./state.ts`; here the dialog shows and submits.
 */
import { Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { h } from '../../dom';
import { JobsAPI } from '../client';
import { ISubmitBody, ISubmitReply } from '../types';
import { SubmitFields } from './fields';
import { FormState } from './state';

export namespace SubmitForm {
  export interface IOptions extends SubmitFields.IOptions {
    /** Called just before posting, e.g. to save the notebook. */
    beforeSubmit: () => Promise<void>;
  }
}

/** The dialog body. `submit()` posts and reports success or shows errors. */
export class SubmitForm extends Widget {
  constructor(options: SubmitForm.IOptions) {
    super({
      node: h('form', { className: 'gpuhub-JobForm', novalidate: true })
    });
    this._opts = options;
    this.node.addEventListener('submit', event => event.preventDefault());
    this._fields = new SubmitFields(options, {
      changed: () => this._state.sync(),
      edited: field => this._state.clearError(field)
    });
    this._state = new FormState(this._fields, options);
    this.node.append(...this._fields.nodes);
    const last = FormState.last;
    if (last) {
      this._state.restore(last);
    }
    this._state.sync();
    this._state.loadQuota();
  }

  /** The server's answer once a submit succeeded. */
  get result(): ISubmitReply | null {
    return this._result;
  }

  get busy(): boolean {
    return this._busy;
  }

  /** The request body as the form stands. */
  body(): ISubmitBody {
    return this._state.body();
  }

  /** Save the notebook, post, and return true when the server accepted. */
  async submit(): Promise<boolean> {
    if (this._busy) {
      return false;
    }
    const status = this._fields.status;
    this._busy = true;
    this._state.clearErrors();
    status.textContent = 'Saving the notebook…';
    this.node.setAttribute('aria-busy', 'true');
    try {
      await this._opts.beforeSubmit();
      status.textContent = 'Submitting…';
      const body = this._state.body();
      this._result = await JobsAPI.submit(body);
      FormState.remember(body);
      return true;
    } catch (error) {
      this._state.showError(error);
      return false;
    } finally {
      this._busy = false;
      status.textContent = '';
      this.node.removeAttribute('aria-busy');
    }
  }

  private _busy = false;
  private _fields: SubmitFields;
  private _opts: SubmitForm.IOptions;
  private _result: ISubmitReply | null = null;
  private _state: FormState;
}

/**
 * A dialog whose Submit button posts first and closes only when the server
 * accepted; a refusal leaves it open with the message in place.
 */
class SubmitDialog extends Dialog<void> {
  constructor(
    private _form: SubmitForm,
    title: string
  ) {
    super({
      title,
      body: _form,
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: 'Submit', ariaLabel: 'Submit job' })
      ],
      defaultButton: 1,
      focusNodeSelector: 'input[type=radio]:checked',
      hasClose: true
    });
    this.addClass('gpuhub-JobDialog');
  }

  resolve(index?: number): void {
    const chosen = index ?? 1;
    if (chosen !== 1) {
      super.resolve(index);
      return;
    }
    if (this._form.busy) {
      return;
    }
    const submitButton = this.node.querySelector<HTMLButtonElement>(
      '.jp-Dialog-footer .jp-mod-accept'
    );
    if (submitButton) {
      submitButton.disabled = true;
    }
    void this._form.submit().then(accepted => {
      if (submitButton) {
        submitButton.disabled = false;
      }
      if (accepted) {
        super.resolve(index);
      }
    });
  }
}

/** Open the dialog; resolves with the server's answer, or null if cancelled. */
export async function showSubmitDialog(
  options: SubmitForm.IOptions
): Promise<ISubmitReply | null> {
  const form = new SubmitForm(options);
  const name = options.notebook.split('/').pop();
  const dialog = new SubmitDialog(
    form,
    options.options.kubernetes
      ? `Run ${name} on the cluster`
      : `Run ${name} as a job`
  );
  const answer = await dialog.launch();
  return answer.button.accept ? form.result : null;
}
